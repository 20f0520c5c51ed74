/* config.c - the built-in models (model_config_builtin) and a config as
 * JSON (model_config_json), the object a dump stores as its "config"
 * metadata. Reading a JSON config file is config_json.c's; the rules a
 * config must keep are config_validate.c's.
 */
#include "model/gpt.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "parity/fileio.h"
#include "parity/json.h"
#include "parity/numparse.h"

/* Shared optimizer and dropout settings of the built-ins (the lead's
 * issue #3 notes): AdamW 0.9/0.95, warm-up 2 then cosine to lr/10. */
static void common_defaults(model_config_t *c) {
    memset(c, 0, sizeof *c);
    c->tied = 1;
    c->hidden_dropout = 0.1f;
    c->attention_dropout = 0.1f;
    c->ln_eps = 1e-5f;
    c->seed = 1234;
    c->lr = 1e-3f;
    c->min_lr = 1e-4f;
    c->warmup = 2;
    c->decay_steps = 100;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->clip_grad = 1.0f;
    c->optimizer = MODEL_OPT_ADAM;
    c->optimizer_block = ADAM8_DEFAULT_BLOCK; /* inert under adam */
    c->moe_topk = 2; /* Megatron's defaults; inert while moe_experts is 0 */
    c->moe_layer_freq = 1;
}

void model_loss_scaling(const model_config_t *c, float *initial, float *min, int *window,
                        int *hysteresis) {
    *initial = c->initial_loss_scale > 0 ? c->initial_loss_scale : 0x1p32f;
    *min = c->min_loss_scale > 0 ? c->min_loss_scale : 1.0f;
    *window = c->loss_scale_window > 0 ? c->loss_scale_window : 1000;
    *hysteresis = c->hysteresis > 0 ? c->hysteresis : 2;
}

const char *model_precision_name(int precision) {
    return precision == MODEL_BF16 ? "bf16" : precision == MODEL_FP16 ? "fp16" : "fp32";
}

static const char *const builtin_names[] = {"gpt-micro", "gpt-tiny", "gpt-small", "gpt-124m",
                                            "t5-tiny",   "t5-small", "llava-tiny", NULL};

const char *model_arch_name(int arch) {
    return arch == MODEL_T5 ? "t5" : arch == MODEL_LLAVA ? "llava" : "gpt";
}

const char *const *model_builtin_names(void) { return builtin_names; }

const char *model_optimizer_name(int optimizer) {
    return optimizer == MODEL_OPT_ADAMW8BIT ? "adamw8bit" : "adam";
}

int model_config_builtin(const char *name, model_config_t *c, perr_t *err) {
    common_defaults(c);
    if (!strcmp(name, "gpt-micro")) {
        /* Small enough that a full 3-step dump (< 1 MB) lives in golden/. */
        c->vocab = 256, c->seq_length = 16, c->hidden = 16, c->heads = 2, c->layers = 2;
        c->ffn = 64;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 16;
        c->global_batch = 4, c->micro_batch = 2;
    } else if (!strcmp(name, "gpt-tiny")) {
        /* Every degree the layout tests use lands on tile boundaries:
         * 8 token tiles per sequence, 8 feature tiles (one head each),
         * 8 ffn tiles, 8 layers, and B = 24 divides by dp in 1,2,3,4,6,8. */
        c->vocab = 256, c->seq_length = 32, c->hidden = 64, c->heads = 8, c->layers = 8;
        c->ffn = 256;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 32;
        c->global_batch = 24, c->micro_batch = 24;
    } else if (!strcmp(name, "gpt-124m")) {
        /* GPT-2 small's shape (124M parameters, 50304 = 50257 padded to
         * a multiple of 64); no dropout, as gpt-small. Its tiles admit
         * tp 1, 2, 4, 8 (786 vocabulary tiles, split unevenly where tp
         * does not divide them; 12 feature tiles = 12 heads of 64; 8 ffn
         * tiles) and cp 2 and 4 (8 token tiles). ~5 GB and ~30 s a step
         * on one core. */
        c->vocab = 50304, c->seq_length = 1024, c->hidden = 768, c->heads = 12, c->layers = 12;
        c->ffn = 3072;
        c->tile_tokens = 128, c->tile_features = 64, c->tile_ffn = 384;
        c->global_batch = 1, c->micro_batch = 1;
        c->hidden_dropout = 0.0f, c->attention_dropout = 0.0f;
    } else if (!strcmp(name, "gpt-small")) {
        /* The benchmark model (3,257,856 parameters, 1024 tokens a step);
         * large tiles for speed, no dropout (as the PyTorch anchor). */
        c->vocab = 256, c->seq_length = 128, c->hidden = 256, c->heads = 8, c->layers = 4;
        c->ffn = 1024;
        c->tile_tokens = 128, c->tile_features = 128, c->tile_ffn = 256;
        c->global_batch = 8, c->micro_batch = 8;
        c->hidden_dropout = 0.0f, c->attention_dropout = 0.0f;
    } else if (!strcmp(name, "t5-tiny")) {
        /* An encoder-decoder (MODEL.md "Encoder-decoder models"): 16
         * source then 16 target positions a sequence, 2 encoder and 2
         * decoder layers; 8 heads (tp 2, 4, 8), 8 token tiles (sp). */
        c->arch = MODEL_T5, c->tied = 0; /* T5 v1.1's own LM head */
        c->vocab = 256, c->seq_length = 32, c->hidden = 64, c->heads = 8, c->layers = 2;
        c->encoder_layers = 2, c->encoder_seq_length = 16;
        c->ffn = 256;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 32;
        c->global_batch = 8, c->micro_batch = 8;
    } else if (!strcmp(name, "llava-tiny")) {
        /* A LLaVA-style model (MODEL.md "Encoder-decoder models"): 16
         * image patches of 48 values (a ViT of 2 layers and a projector)
         * before 16 text positions of a 2-layer GPT decoder; the loss on
         * the text. t5-tiny's widths and tiles. */
        c->arch = MODEL_LLAVA, c->tied = 0;
        c->vocab = 256, c->seq_length = 32, c->hidden = 64, c->heads = 8, c->layers = 2;
        c->encoder_layers = 2, c->encoder_seq_length = 16, c->patch_dim = 48;
        c->ffn = 256;
        c->tile_tokens = 4, c->tile_features = 8, c->tile_ffn = 32;
        c->global_batch = 8, c->micro_batch = 8;
    } else if (!strcmp(name, "t5-small")) {
        /* The encoder-decoder benchmark: gpt-small's widths, 128 source
         * and 128 target positions, 4 + 4 layers, no dropout. */
        c->arch = MODEL_T5, c->tied = 0;
        c->vocab = 256, c->seq_length = 256, c->hidden = 256, c->heads = 8, c->layers = 4;
        c->encoder_layers = 4, c->encoder_seq_length = 128;
        c->ffn = 1024;
        c->tile_tokens = 128, c->tile_features = 128, c->tile_ffn = 256;
        c->global_batch = 4, c->micro_batch = 4;
        c->hidden_dropout = 0.0f, c->attention_dropout = 0.0f;
    } else {
        char list[256] = "";
        for (const char *const *n = builtin_names; *n; n++) {
            if (n != builtin_names) strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, *n, sizeof list - strlen(list) - 1);
        }
        return perr_set(err, "unknown model '%s' (built-in models: %s; or give a .json config file)",
                        name, list);
    }
    snprintf(c->name, sizeof c->name, "%s", name);
    return 0;
}

/* A name as a JSON string body: quotes, backslashes and control bytes
 * become '_' (names are labels, never parsed back for meaning). */
static void json_safe_name(const char *in, char *out, size_t cap) {
    size_t i = 0;
    for (; in[i] && i + 1 < cap; i++) {
        unsigned char ch = (unsigned char)in[i];
        out[i] = (ch < 0x20 || ch == '"' || ch == '\\') ? '_' : (char)ch;
    }
    out[i] = 0;
}

char *model_config_json(const model_config_t *c) {
    size_t cap = 2048;
    char *s = malloc(cap);
    if (!s) return NULL;
    char name[sizeof c->name];
    json_safe_name(c->name, name, sizeof name);
    snprintf(s, cap,
             "{\"name\": \"%s\", \"vocab\": %d, \"seq_length\": %d, \"hidden\": %d, "
             "\"heads\": %d, \"layers\": %d, \"ffn\": %d, "
             "\"tiles\": {\"tokens\": %d, \"features\": %d, \"ffn\": %d}, "
             "\"tied\": %s, \"dropouts\": {\"hidden\": %.9g, \"attention\": %.9g}, "
             "\"ln_eps\": %.9g, \"seed\": %llu, \"global_batch\": %d, \"micro_batch\": %d, "
             "\"lr\": %.9g, \"min_lr\": %.9g, \"warmup\": %d, \"decay_steps\": %d, "
             "\"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, \"weight_decay\": %.9g, "
             "\"clip_grad\": %.9g}",
             name, c->vocab, c->seq_length, c->hidden, c->heads, c->layers, c->ffn,
             c->tile_tokens, c->tile_features, c->tile_ffn, c->tied ? "true" : "false",
             (double)c->hidden_dropout, (double)c->attention_dropout, (double)c->ln_eps,
             (unsigned long long)c->seed, c->global_batch, c->micro_batch, (double)c->lr,
             (double)c->min_lr, c->warmup, c->decay_steps, (double)c->beta1, (double)c->beta2,
             (double)c->eps, (double)c->weight_decay, (double)c->clip_grad);
    { /* always, inert fields too: the JSON is the whole config (a round trip) */
        const size_t at = strlen(s) - 1; /* over the closing brace */
        snprintf(s + at, cap - at,
                 ", \"moe\": {\"experts\": %d, \"topk\": %d, \"layer_freq\": %d, "
                 "\"pre_softmax\": %s, \"aux_loss_coeff\": %.9g, \"z_loss_coeff\": %.9g, "
                 "\"capacity_factor\": %.9g, \"drop_policy\": \"%s\"%s}}",
                 c->moe_experts, c->moe_topk, c->moe_layer_freq,
                 c->moe_pre_softmax ? "true" : "false", (double)c->moe_aux_loss_coeff,
                 (double)c->moe_z_loss_coeff, (double)c->moe_capacity_factor,
                 c->moe_drop_position ? "position" : "probs",
                 /* the model's dtype (the default) leaves the JSON as it was */
                 c->moe_router_dtype == MOE_ROUTER_FP32 ? ", \"router_dtype\": \"fp32\"" : "");
    }
    if (c->precision || c->grad_dtype || c->optim_dtype) { /* fp32's JSON stays as it was */
        const size_t at = strlen(s) - 1;
        snprintf(s + at, cap - at, ", \"precision\": {\"dtype\": \"%s\", \"loss_scale\": %.9g, "
                 "\"initial_loss_scale\": %.9g, \"min_loss_scale\": %.9g, \"loss_scale_window\": "
                 "%d, \"hysteresis\": %d, \"grad_dtype\": \"%s\", \"optim_dtype\": \"%s\"}}",
                 model_precision_name(c->precision), (double)c->loss_scale,
                 (double)c->initial_loss_scale, (double)c->min_loss_scale, c->loss_scale_window,
                 c->hysteresis, model_precision_name(c->grad_dtype),
                 model_precision_name(c->optim_dtype));
    }
    if (c->optimizer != MODEL_OPT_ADAM) { /* adam's JSON stays as it was (golden/'s dumps) */
        const size_t at = strlen(s) - 1;
        snprintf(s + at, cap - at, ", \"optimizer\": {\"name\": \"%s\", \"block\": %d}}",
                 model_optimizer_name(c->optimizer), c->optimizer_block);
    }
    if (c->arch != MODEL_GPT) { /* the GPT's JSON stays as it was (golden/'s dumps) */
        const size_t at = strlen(s) - 1;
        snprintf(s + at, cap - at, ", \"arch\": \"%s\", \"encoder\": {\"layers\": %d, "
                 "\"seq_length\": %d, \"patch_dim\": %d}}", model_arch_name(c->arch),
                 c->encoder_layers, c->encoder_seq_length, c->patch_dim);
    }
    return s;
}
