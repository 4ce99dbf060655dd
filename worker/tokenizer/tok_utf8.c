/* tok_utf8.c - UTF-8 stepping/validation, the GPT-2 byte alphabet, whitespace.
 *
 * tok_utf8_step follows the Unicode "maximal subpart" rule (the one Rust's
 * String::from_utf8_lossy and the WHATWG decoder use), so that lossy decoding gives
 * the same U+FFFD count whether bytes arrive at once or token by token.  Overlong
 * forms, surrogates and codepoints above U+10FFFF are invalid.
 *
 * The byte alphabet is computed, not tabulated: printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for U+0100.. in byte order (GPT-2's bytes_to_unicode).
 */
#include "tok_internal.h"

int tok_utf8_step(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0)
        need = 2, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
        need = 2;
    else if (c == 0xED)
        need = 2, hi = 0x9F;
    else if (c == 0xF0)
        need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else if (c == 0xF4)
        need = 3, hi = 0x8F;
    else
        return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n)
            return 0;
        unsigned b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -k;
    }
    return need + 1;
}

size_t tok_utf8_check(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            __builtin_memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        int k = tok_utf8_step(p + i, n - i);
        if (k <= 0)
            return i;
        i += (size_t)k;
    }
    return n;
}

uint32_t tok_utf8_decode(const unsigned char *s, int k)
{
    switch (k) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

int tok_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int self_byte(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (self_byte(b))
        return b;
    if (b <= 0x20)
        return 256u + b;                    /* 0..32   -> n 0..32  */
    if (b >= 0x7F && b <= 0xA0)
        return 256u + 33 + (b - 0x7Fu);     /* 127..160 -> n 33..66 */
    return 256u + 67;                       /* 173 */
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return self_byte(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    unsigned n = cp - 256;
    return n < 33 ? (int)n : n < 67 ? (int)(0x7F + n - 33) : 0xAD;
}

int tok_is_whitespace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
