/* attn_kern.c - the baseline instance of attn_kern.h's loops (attn_kern_body.h with
 * the target's default ISA: SSE2 on x86-64, any other architecture too) and the
 * run-time choice: the widest instance the CPU supports, or the one for a CPU backend
 * ISA (v4_attn_kern_for_isa, once per context).  No state: the choice reads the CPU's
 * feature bits on every call (cheap).
 * Thread: any. */
#define V4_AK_SUFFIX portable
#define V4_AK_VW 2
#define V4_AK_KB 2
#define V4_AK_HP 2
#include "attn_kern_body.h"

#include <stddef.h>
#include <string.h>

static const v4_attn_kern k_portable = {
    .name = "portable",
    .dots8 = v4_ak_dots8_portable,
    .accum8 = v4_ak_accum8_portable,
    .dots8_bf16 = v4_ak_dots8_bf16_portable,
    .accum8_bf16 = v4_ak_accum8_bf16_portable,
    .relu_terms8 = v4_ak_relu_terms8_portable,
    .div_bf16 = v4_ak_div_bf16_portable,
};
#if defined(__x86_64__)
static const v4_attn_kern k_avx2 = {
    .name = "avx2",
    .dots8 = v4_ak_dots8_avx2,
    .accum8 = v4_ak_accum8_avx2,
    .dots8_bf16 = v4_ak_dots8_bf16_avx2,
    .accum8_bf16 = v4_ak_accum8_bf16_avx2,
    .relu_terms8 = v4_ak_relu_terms8_avx2,
    .div_bf16 = v4_ak_div_bf16_avx2,
};
static const v4_attn_kern k_avx512 = {
    .name = "avx512",
    .dots8 = v4_ak_dots8_avx512,
    .accum8 = v4_ak_accum8_avx512,
    .dots8_bf16 = v4_ak_dots8_bf16_avx512,
    .accum8_bf16 = v4_ak_accum8_bf16_avx512,
    .relu_terms8 = v4_ak_relu_terms8_avx512,
    .div_bf16 = v4_ak_div_bf16_avx512,
};

/* The flags attn_kern_avx2.c / attn_kern_avx512.c are compiled with (CMakeLists.txt). */
static int have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int have_avx512(void)
{
    return have_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
#endif

const v4_attn_kern *v4_attn_kern_get(void)
{
#if defined(__x86_64__)
    if (have_avx512())
        return &k_avx512;
    if (have_avx2())
        return &k_avx2;
#endif
    return &k_portable;
}

const v4_attn_kern *v4_attn_kern_by_name(const char *name)
{
    if (!name)
        return NULL;
    if (strcmp(name, "portable") == 0)
        return &k_portable;
#if defined(__x86_64__)
    if (strcmp(name, "avx2") == 0)
        return have_avx2() ? &k_avx2 : NULL;
    if (strcmp(name, "avx512") == 0)
        return have_avx512() ? &k_avx512 : NULL;
#endif
    return NULL;
}

const v4_attn_kern *v4_attn_kern_for_isa(const char *isa)
{
    if (!isa)
        return v4_attn_kern_get();
    if (strcmp(isa, "scalar") == 0)
        return NULL;
    if (strcmp(isa, "avx2") == 0)
        return v4_attn_kern_by_name("avx2");
    if (strcmp(isa, "avx512") == 0 || strcmp(isa, "avx512vnni") == 0)
        return v4_attn_kern_by_name("avx512");
    return v4_attn_kern_get();
}

const char *v4_attn_kern_name(const v4_attn_kern *K)
{
    return K ? K->name : "reference";
}
