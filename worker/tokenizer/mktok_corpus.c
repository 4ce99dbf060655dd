/* mktok_corpus.c - the built-in training text of the synthetic tokenizer.
 *
 * A few paragraphs of plain English (written for this file), then deterministic
 * generated text from a fixed-seed xorshift generator: sentences over a list of
 * common English words (lower case, capitalised, after a space), all numbers 0-999,
 * short C-like code lines, and pronounceable pseudo-words built from syllables (so
 * that larger vocabularies still find frequent pairs).  ~400 KB; deterministic, no
 * global state.  The quality of the tokenizer does not matter (the models are
 * random); what matters is that it is a real byte-level BPE with plausible merges.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/strbuf.h"
#include "mktok_internal.h"

static const char PROSE[] =
    "The river ran slowly through the old town, past the market and the stone bridge, and "
    "on towards the sea. In the morning the fishermen came back with their boats, and the "
    "children ran down to the water to see what they had caught. Most days it was only a "
    "few small fish, but sometimes there was something strange: a shell the size of a hand, "
    "a piece of wood carved with letters nobody could read, or a bottle with a message "
    "inside.\n\n"
    "A language model reads text as a sequence of tokens. Each token is a short piece of "
    "text, often a whole word, sometimes only a part of one. The model has learned, from a "
    "very large amount of writing, which token is likely to come next. When it answers a "
    "question it does nothing more than that, one token after another, until it decides "
    "that the answer is complete.\n\n"
    "Memory bandwidth, not arithmetic, limits how fast a large model can generate text on "
    "a single machine. For every new token the weights of the network have to be read "
    "from memory at least once. A model with many experts only reads the few experts that "
    "each token is routed to, which is why such models can be both large and fast.\n\n"
    "She opened the window and looked at the garden. The rain had stopped an hour ago, "
    "but the leaves were still wet and the air smelled of earth. Somewhere a bird was "
    "singing. \"We should go for a walk,\" she said, \"before it starts again.\" He did not "
    "answer; he was reading, and he had not heard her.\n\n"
    "Questions and answers:\n"
    "What is the capital of France? Paris.\n"
    "How many days are there in a week? Seven.\n"
    "Why is the sky blue? Because air scatters blue light more than red light.\n"
    "Who wrote this sentence? Nobody you know.\n\n";

static const char *const WORDS[] = {
    "the", "be", "to", "of", "and", "a", "in", "that", "have", "it", "for", "not", "on",
    "with", "he", "as", "you", "do", "at", "this", "but", "his", "by", "from", "they", "we",
    "say", "her", "she", "or", "an", "will", "my", "one", "all", "would", "there", "their",
    "what", "so", "up", "out", "if", "about", "who", "get", "which", "go", "me", "when",
    "make", "can", "like", "time", "no", "just", "him", "know", "take", "people", "into",
    "year", "your", "good", "some", "could", "them", "see", "other", "than", "then", "now",
    "look", "only", "come", "its", "over", "think", "also", "back", "after", "use", "two",
    "how", "our", "work", "first", "well", "way", "even", "new", "want", "because", "any",
    "these", "give", "day", "most", "us", "is", "was", "are", "were", "been", "has", "had",
    "said", "made", "went", "found", "world", "life", "hand", "part", "child", "eye", "woman",
    "place", "week", "case", "point", "number", "group", "problem", "fact", "water", "house",
    "question", "answer", "model", "token", "text", "memory", "expert", "layer", "attention",
    "sequence", "context", "window", "cache", "queue", "worker", "request", "result", "error",
    "system", "program", "computer", "language", "machine", "network", "weight", "value",
    "small", "large", "long", "little", "great", "old", "right", "big", "high", "different",
    "important", "every", "never", "always", "something", "nothing", "everything", "before",
    "between", "under", "again", "still", "while", "where", "why", "each", "many", "much",
    "city", "country", "school", "family", "story", "night", "morning", "evening", "light",
};

static const char *const SYLLABLES[] = {
    "ka", "ro", "mi", "ten", "sa", "lo", "ve", "ri", "an", "ber", "da", "nu", "pe", "ul",
    "gar", "mon", "ti", "so", "la", "ne", "qui", "dor", "el", "fa", "ho", "ing", "ment",
    "tion", "er", "ly", "ous", "ist", "pro", "con", "dis", "ex", "re", "un", "im", "ac",
    "bri", "cha", "dro", "fle", "glo", "kri", "mar", "nor", "pla", "sto", "tra", "vin",
    "wes", "yor", "zan", "que", "phi", "tho", "shu", "ble",
};

#define NW (sizeof WORDS / sizeof WORDS[0])
#define NS (sizeof SYLLABLES / sizeof SYLLABLES[0])


static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Roughly Zipfian index in [0, n): the minimum of two uniforms, twice. */
static size_t zipf(uint64_t *s, size_t n)
{
    size_t a = next(s) % n, b = next(s) % n, c = next(s) % n;
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

static void sentence(v4_strbuf *b, uint64_t *s)
{
    int words = 4 + (int)(next(s) % 12);
    for (int w = 0; w < words; w++) {
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%s", WORDS[zipf(s, NW)]);
        if (w == 0 && tmp[0] >= 'a' && tmp[0] <= 'z')
            tmp[0] = (char)(tmp[0] - 'a' + 'A');
        if (w)
            v4_sb_put(b, next(s) % 17 ? " " : ", ");
        v4_sb_put(b, tmp);
    }
    v4_sb_put(b, next(s) % 6 ? ". " : "? ");
    if (!(next(s) % 8))
        v4_sb_put(b, "\n");
}

static void pseudo_word(v4_strbuf *b, uint64_t *s)
{
    int k = 2 + (int)(next(s) % 3);
    v4_sb_put(b, next(s) % 4 ? " " : "\n");
    for (int i = 0; i < k; i++)
        v4_sb_put(b, SYLLABLES[zipf(s, NS)]);
}

static void code_line(v4_strbuf *b, uint64_t *s)
{
    char line[160];
    const char *x = WORDS[zipf(s, NW)], *y = WORDS[zipf(s, NW)];
    switch (next(s) % 4) {
    case 0: snprintf(line, sizeof line, "    for (int i = 0; i < n_%s; i++) %s[i] = 0;\n", x, y); break;
    case 1: snprintf(line, sizeof line, "    if (%s == NULL) return -1;\n", x); break;
    case 2: snprintf(line, sizeof line, "    %s_%s(&%s, %d);\n", x, y, x, (int)(next(s) % 100)); break;
    default: snprintf(line, sizeof line, "def %s(%s):\n    return %s + 1\n", x, y, y); break;
    }
    v4_sb_put(b, line);
}

char *mktok_corpus(size_t *len)
{
    v4_strbuf b = {0};
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (int rep = 0; rep < 8; rep++)
        v4_sb_put(&b, PROSE);
    for (int i = 0; i < 1000; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d%s", i, i % 10 == 9 ? "\n" : " ");
        v4_sb_put(&b, num);
    }
    for (int i = 0; i < 4000; i++)
        sentence(&b, &s);
    for (int i = 0; i < 1500; i++)
        code_line(&b, &s);
    for (int i = 0; i < 40000; i++)
        pseudo_word(&b, &s);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}
