/* mkmodel_presets.c - the model configurations `v4fleet mkmodel --preset` writes.
 *
 *   tiny   the golden tiny config (spec v4-decode.md §8.2, without the MTP block);
 *          with the default layer count its checkpoint has exactly the layout of
 *          tests/data/golden/tiny/model.
 *   small  a half-width V4-Flash: ~2.6 GB read per decode token, ~9 GB on disk:
 *          dim 4096, 16 layers [0,0,4,128,4,128,...], 32 heads x 512, q_lora 1024,
 *          o_groups 8 x o_lora 1024, window 128, 64 routed experts top-6 + 1 shared,
 *          moe_inter 1024, 3 hash layers, indexer 16 heads x 128 top-512, vocab 32768.
 *   flash  the real V4-Flash config (spec §2.1): vocab 129280, dim 4096, 43 layers with
 *          compress_ratios [0,0,4,128,4,...,128,4] (2 window-only, 21 CSA, 20 HCA),
 *          64 heads x 512 (RoPE 64), q_lora 1024, o_groups 8 x o_lora 1024, window 128,
 *          256 routed FP4 experts top-6 + 1 FP8 shared, moe_inter 2048, layers 0-2
 *          hash-routed, indexer 64 heads x 128 top-512, mHC 4 streams / 20 Sinkhorn
 *          iterations, route scale 1.5, SwiGLU clamp 10, RoPE 10000 / 160000 + YaRN
 *          (factor 16, original 65536, beta 32/1), context 1048576, BOS 0 / EOS 1.
 *          The MTP block is not written (num_nextn_predict_layers 0: decode never runs
 *          it), so the full checkpoint is the main model: 156,015,698,140 tensor bytes.
 * --layers L keeps the first L layers of a preset's pattern (and at most L hash layers).
 *
 * Owner: the mkmodel work package.  Thread: any (pure functions on caller memory).
 */
#include <string.h>

#include "mkmodel.h"

static void preset_common(v4_config *c)
{
    memset(c, 0, sizeof *c);
    c->n_mtp_layers = 0;
    c->n_kv_heads = 1;
    c->rope_head_dim = 64;
    c->n_shared_experts = 1;
    c->route_scale = 1.5f;
    c->swiglu_limit = 10.0f;
    c->index_head_dim = 128;
    c->hc_mult = 4;
    c->hc_iters = 20;
    c->hc_eps = 1e-6f;
    c->norm_eps = 1e-6f;
    c->rope_theta = 10000;
    c->compress_rope_theta = 160000;
    c->rope_factor = 16;
    c->original_seq_len = 65536;
    c->beta_fast = 32;
    c->beta_slow = 1;
    c->max_position = 1048576;
    c->bos_id = 0;
    c->eos_id = 1;
    c->expert_fp4 = 1;
}

/* The V4-Flash layer pattern: 0, 0, then 4 (CSA) on even and 128 (HCA) on odd layers. */
static void flash_ratios(v4_config *c)
{
    for (int l = 0; l < c->n_layers; l++)
        c->compress_ratios[l] = l < 2 ? 0 : (l % 2 == 0 ? 4 : 128);
}

static void preset_tiny(v4_config *c)
{
    static const int ratios[4] = {0, 4, 128, 4};
    preset_common(c);
    c->vocab_size = 4096;
    c->dim = 256;
    c->n_layers = 4;
    memcpy(c->compress_ratios, ratios, sizeof ratios);
    c->n_heads = 4;
    c->head_dim = 128;
    c->q_lora_rank = 128;
    c->o_groups = 2;
    c->o_lora_rank = 128;
    c->window = 32;
    c->n_routed_experts = 16;
    c->n_act_experts = 4;
    c->moe_inter = 128;
    c->n_hash_layers = 2;
    c->index_n_heads = 4;
    c->index_topk = 16;
}

static void preset_small(v4_config *c)
{
    preset_common(c);
    c->vocab_size = 32768;
    c->dim = 4096;
    c->n_layers = 16;
    flash_ratios(c);
    c->n_heads = 32;
    c->head_dim = 512;
    c->q_lora_rank = 1024;
    c->o_groups = 8;
    c->o_lora_rank = 1024;
    c->window = 128;
    c->n_routed_experts = 64;
    c->n_act_experts = 6;
    c->moe_inter = 1024;
    c->n_hash_layers = 3;
    c->index_n_heads = 16;
    c->index_topk = 512;
}

static void preset_flash(v4_config *c)
{
    preset_common(c);
    c->vocab_size = 129280;
    c->dim = 4096;
    c->n_layers = 43;
    flash_ratios(c);
    c->n_heads = 64;
    c->head_dim = 512;
    c->q_lora_rank = 1024;
    c->o_groups = 8;
    c->o_lora_rank = 1024;
    c->window = 128;
    c->n_routed_experts = 256;
    c->n_act_experts = 6;
    c->moe_inter = 2048;
    c->n_hash_layers = 3;
    c->index_n_heads = 64;
    c->index_topk = 512;
}

const char *v4mk_preset_names(void) { return "tiny|small|flash"; }

int v4mk_preset(const char *name, int layers, v4_config *c, v4_error *err)
{
    if (!strcmp(name, "tiny"))
        preset_tiny(c);
    else if (!strcmp(name, "small"))
        preset_small(c);
    else if (!strcmp(name, "flash"))
        preset_flash(c);
    else
        return v4_err_set(err, V4_ERR_INVALID, "--preset", "unknown preset '%s' (%s)", name,
                          v4mk_preset_names());
    if (layers < 0 || layers > c->n_layers)
        return v4_err_set(err, V4_ERR_INVALID, "--layers", "preset %s has 1..%d layers, got %d", name,
                          c->n_layers, layers);
    if (layers > 0) {
        for (int l = layers; l < c->n_layers; l++)
            c->compress_ratios[l] = 0;
        c->n_layers = layers;
        if (c->n_hash_layers > layers)
            c->n_hash_layers = layers;
    }
    return 0;
}
