/* test_colossal.c - Colossal-AI's `parallel = dict(...)` file (colossal.h):
 * the documented forms give their degrees; everything else is -1 with a
 * message naming the file, the line and the key. */
#include <string.h>

#include "model/gpt.h"
#include "../harness.h"
#include "parity/colossal.h"

static int parse_n(const char *text, size_t len, pconfig_t *pc, perr_t *err) {
    pconfig_defaults(pc);
    err->msg[0] = 0;
    return colossal_parse(text, len, "cfg.py", pc, err);
}
static int parse(const char *text, pconfig_t *pc, perr_t *err) {
    return parse_n(text, strlen(text), pc, err);
}

/* text must give pp and tp (and leave dp as given: 0 unless data=...) */
static void good(const char *text, int pp, int tp, int dp) {
    pconfig_t pc;
    perr_t err;
    int rc = parse(text, &pc, &err);
    CHECK(rc == 0, "rc %d: %s\n--- file:\n%s", rc, err.msg, text);
    CHECK(rc != 0 || (pc.pp == pp && pc.tp == tp && pc.dp == dp),
          "pp %d tp %d dp %d, expected %d %d %d for:\n%s", pc.pp, pc.tp, pc.dp, pp, tp, dp, text);
}

static const char GPT_CONFIG[] =
    "#!/usr/bin/env python\n"
    "\"\"\"GPT-2 with 1-D tensor and pipeline parallelism (it's 'ours').\"\"\"\n"
    "from colossalai.amp import AMP_TYPE\n"
    "import colossalai\n"
    "from colossalai.zero.shard_utils import (TensorShardStrategy,\n"
    "                                         BucketTensorShardStrategy)\n"
    "\n"
    "BATCH_SIZE = 128  # per step\n"
    "NUM_EPOCHS = 2\n"
    "LEARNING_RATE = 3e-4\n"
    "WEIGHT_DECAY = .3\n"
    "WARMUP = -1\n"
    "NAME = 'gpt2 \\'small\\'\\n'\n"
    "fp16 = dict(\n"
    "    mode=AMP_TYPE.NAIVE,  # Colossal-AI's own amp\n"
    ")\n"
    "layers = [1, 2, (3, 4), {'a': [None, True, False]}, (), (5,), [], {1: -2.5}]\n"
    "SEQ_LEN = \\\n"
    "    1024\n"
    "TENSOR_PARALLEL_SIZE = 2\n"
    "TENSOR_PARALLEL_MODE = '1d'\n"
    "TP = TENSOR_PARALLEL_SIZE\n"
    "\n"
    "parallel = dict(\n"
    "    pipeline=dict(size=4),  # stages\n"
    "    tensor=dict(mode=TENSOR_PARALLEL_MODE,\n"
    "                size=TP),\n"
    ")\n"
    "gradient_accumulation = 4\n"
    "clip_grad_norm = 1.0\n";

static void test_documented_forms(void) {
    good("parallel = dict(\n    pipeline=2,\n    tensor=dict(size=4, mode='1d'),\n)\n", 2, 4, 0);
    good("parallel = dict(pipeline=dict(size=2), tensor=dict(size=4, mode=\"1d\"))", 2, 4, 0);
    good("parallel = dict(pipeline=2)\n", 2, 1, 0);
    good("parallel = dict(pipeline=dict(size=4),)\n", 4, 1, 0);
    good("parallel = dict(tensor=dict(size=4, mode='1d'))\n", 1, 4, 0);
    good("parallel = dict()\n", 1, 1, 0);
    good("parallel = {}", 1, 1, 0);
    /* define_your_config.md's form: data is kept for pconfig_validate */
    good("parallel = dict(\n   data=1,\n   pipeline=1,\n   tensor=dict(size=2, mode='1d'),\n)\n", 1, 2, 1);
    /* the dict-literal spelling, trailing commas, CRLF line ends */
    good("parallel = {\r\n  'pipeline': {'size': 2},\r\n  \"tensor\": {'size': 2, 'mode': '1d',},\r\n}\r\n",
         2, 2, 0);
    /* size 1: no tensor parallelism, with or without a mode */
    good("parallel = dict(tensor=dict(size=1))", 1, 1, 0);
    good("parallel = dict(tensor=dict(size=1, mode=None), pipeline=(3))", 3, 1, 0);
    good("parallel = dict(tensor=dict(size=+8, mode='1d'), pipeline=4096)", 4096, 8, 0);
}

static void test_realistic_file(void) {
    good(GPT_CONFIG, 4, 2, 0);
    char text[sizeof GPT_CONFIG];
    memcpy(text, GPT_CONFIG, sizeof text);
    memcpy(strstr(text, "NUM_EPOCHS = 2"), "NUM_EPOCHS=2*2", 14); /* an expression on line 9 */
    pconfig_t pc;
    perr_t err;
    CHECK(parse(text, &pc, &err) == -1 && strstr(err.msg, "cfg.py:9: expected the end of the line, got '*'"),
          "%s", err.msg);
    memcpy(text, GPT_CONFIG, sizeof text);
    memcpy(strstr(text, "size=TP"), "size=T2", 7); /* a name never assigned, on line 27 */
    CHECK(parse(text, &pc, &err) == -1 && strstr(err.msg, "cfg.py:27: parallel: 'T2' is not a name"),
          "%s", err.msg);
}

static void test_names(void) {
    good("TP = 8\nTP = 2\nparallel = dict(tensor=dict(size=TP, mode='1d'))", 1, 2, 0);
    good("PP = 3\nP2 = PP\nparallel = {'pipeline': P2}", 3, 1, 0);
    /* many names: the table grows */
    static char big[64 * 1024];
    size_t n = 0;
    for (int i = 0; i < 3000; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "N%d = %d\n", i, i % 7 + 1);
    snprintf(big + n, sizeof big - n,
             "parallel = dict(pipeline=N2999, tensor=dict(size=N2998, mode='1d'))\n");
    good(big, 2999 % 7 + 1, 2998 % 7 + 1, 0);
}

static void test_data_reaches_validate(void) {
    pconfig_t pc;
    perr_t err;
    CHECK(parse("parallel = dict(data=2, tensor=dict(size=2, mode='1d'))", &pc, &err) == 0, "%s", err.msg);
    CHECK(pc.dp == 2 && (pc.given & PC_GIVEN_DP), "dp %d given %#x", pc.dp, pc.given);
    CHECK(pconfig_validate(&pc, 8, &err) == 0 && pc.world_size == 4, "%s world %d", err.msg, pc.world_size);
    CHECK(parse("parallel = dict(data=1, tensor=dict(size=2, mode='1d'))", &pc, &err) == 0, "%s", err.msg);
    pc.world_size = 8; /* --world-size 8: data=1 x tp 2 is 2 devices */
    CHECK(pconfig_validate(&pc, 8, &err) == -1 && strstr(err.msg, "world-size"), "%s", err.msg);
}

/* mode='sequence' (Colossal-AI's ring self-attention) is parity's cp ring:
 * cp = size, the ring's comm type, tp 1; a second source of cp is refused */
static void test_sequence_is_the_cp_ring(void) {
    pconfig_t pc;
    perr_t err;
    CHECK(parse("parallel = dict(tensor=dict(size=4, mode='sequence'), pipeline=2)", &pc, &err) == 0,
          "%s", err.msg);
    CHECK(pc.cp == 4 && pc.cp_comm == 0 && pc.tp == 1 && pc.pp == 2, "cp %d comm %d tp %d pp %d",
          pc.cp, pc.cp_comm, pc.tp, pc.pp);
    pconfig_defaults(&pc);
    pc.cp = 2, err.msg[0] = 0;
    const char *t = "parallel = dict(tensor=dict(size=2, mode='sequence'))";
    CHECK(colossal_parse(t, strlen(t), "cfg.py", &pc, &err) == -1 &&
              strstr(err.msg, "'sequence' is the cp ring") && strstr(err.msg, "give one"),
          "%s", err.msg);
}

typedef struct {
    const char *text;
    const char *frag[3]; /* each must be in the message */
} bad_t;

static const bad_t BAD[] = {
    {"parallel = dict(pipeline=2,\n   tensor=4)",
     {"cfg.py:2:", "parallel.tensor: a size needs a mode", "mode='1d'"}},
    {"parallel = dict(tensor=dict(size=8, mode='2d'))",
     {"cfg.py:1:", "parallel.tensor.size", "2d needs a square size, got 8"}},
    {"parallel = dict(tensor=dict(size=2, mode='2d'))",
     {"parallel.tensor.size", "2d needs a square size, got 2", ""}},
    {"parallel = dict(tensor=dict(size=8, mode='2.5d'))",
     {"parallel.tensor.depth", "missing", "2.5d"}},
    {"parallel = dict(tensor=dict(size=8, mode='2.5d', depth=3))",
     {"parallel.tensor.depth", "3 does not divide the size 8", ""}},
    {"parallel = dict(tensor=dict(size=12, mode='2.5d', depth=2))",
     {"parallel.tensor.size", "12 / depth 2 = 6, not a square", ""}},
    {"parallel = dict(tensor=dict(size=8, mode='2.5d', depth=0))",
     {"parallel.tensor.depth", "'0' is out of range", ""}},
    {"parallel = dict(tensor=dict(size=9, mode='3d'))",
     {"parallel.tensor.size", "3d needs a cube size, got 9", ""}},
    {"parallel = dict(tensor=dict(size=4, mode='1d', depth=2))",
     {"parallel.tensor.depth", "only mode '2.5d' takes a depth", "'1d'"}},
    {"parallel = dict(tensor=dict(size=4, mode='4d'))",
     {"parallel.tensor.mode", "the string '4d'", ""}},
    {"parallel = dict(tensor=dict(size=4, mode='1D'))", {"parallel.tensor.mode", "'1D'", ""}},
    {"parallel = dict(tensor=dict(size=4, mode='one_dimensional_tp'))",
     {"parallel.tensor.mode", "got the string 'one_dimensional...'", ""}},
    {"x = (1 2)\nparallel = dict()", {"cfg.py:1:", "expected ',' or ')' (for line 1), got '2'", ""}},
    {"x = a.[1]\nparallel = dict()", {"cfg.py:1:", "expected a name after '.', got '['", ""}},
    {"parallel = dict(tensor=dict(size=4))",
     {"parallel.tensor.mode", "missing: size 4 needs a mode", ""}},
    {"parallel = dict(tensor=dict(mode='1d'))", {"parallel.tensor.size", "missing", ""}},
    {"parallel = dict(pipeline=dict())", {"parallel.pipeline.size", "missing", ""}},
    {"parallel = dict(zero=2)", {"parallel.zero: unknown key", "pipeline, tensor and data", ""}},
    {"parallel = dict(tensor=dict(size=2, mode='1d', kwargs=1))",
     {"parallel.tensor.kwargs: unknown key", "", ""}},
    {"parallel = dict(pipeline=dict(size=2, chunks=2))",
     {"parallel.pipeline.chunks: unknown key", "", ""}},
    {"parallel = dict(pipeline=2.0)",
     {"parallel.pipeline", "expected an integer", "the float 2.0"}},
    {"parallel = dict(pipeline=1e3)", {"parallel.pipeline", "the float 1e3", ""}},
    {"parallel = dict(pipeline=-2)", {"parallel.pipeline", "'-2' is out of range", "[1, 16384]"}},
    {"parallel = dict(tensor=dict(size=0, mode='1d'))",
     {"parallel.tensor.size", "'0' is out of range", ""}},
    {"parallel = dict(tensor=dict(size=32768, mode='1d'))",
     {"parallel.tensor.size", "'32768' is out of range", ""}},
    {"parallel = dict(pipeline=99999999999999999999999)",
     {"parallel.pipeline", "'99999999999999999999999' is out of range", ""}},
    {"parallel = dict(pipeline=1234567890123456789012345678901234567890123456789)",
     {"parallel.pipeline", "is out of range", "..."}},
    {"parallel = dict(pipeline=True)", {"parallel.pipeline", "got True", ""}},
    {"parallel = dict(pipeline='2')", {"parallel.pipeline", "the string '2'", ""}},
    {"parallel = dict(pipeline=[2])", {"parallel.pipeline", "a list or tuple", ""}},
    {"parallel = dict(tensor=[4, '1d'])",
     {"parallel.tensor", "expected dict(size=N, mode='1d')", ""}},
    {"parallel = dict(pipeline=2, pipeline=4)",
     {"parallel.pipeline: given twice (lines 1 and 1)", "", ""}},
    {"parallel = {'tensor': {'size': 2, 'mode': '1d', 'size': 2}}",
     {"parallel.tensor.size: given twice", "", ""}},
    {"parallel = {1: 2}", {"parallel: expected a string key", "got 1", ""}},
    {"parallel = 4", {"cfg.py:1: parallel: expected dict(...) or {...}", "got 4", ""}},
    {"x = 'it\n'\nparallel = dict()", {"cfg.py:1:", "unterminated string", ""}},
    {"x = \"\"\"doc\nstring\nparallel = dict()",
     {"cfg.py:1:", "unterminated triple-quoted string", ""}},
    {"x = '\\q'\nparallel = dict()", {"cfg.py:1:", "unsupported escape", ""}},
    {"parallel = dict(pipeline=2", {"cfg.py:1:", "expected ',' or ')'", "the end of the file"}},
    {"parallel = dict(\n  pipeline=2,\n\n", {"cfg.py:1:", "never closed", ""}},
    {"parallel = dict(pipeline=2))", {"cfg.py:1:", "expected the end of the line, got ')'", ""}},
    {"parallel = dict(pipeline=2]", {"expected ',' or ')'", "got ']'", ""}},
    {"", {"parallel: not found in cfg.py", "", ""}},
    {"# nothing here\n\nBATCH_SIZE = 8\n", {"parallel: not found in cfg.py", "", ""}},
    {"parallel = dict()\nBATCH_SIZE = 4\nparallel = dict(pipeline=2)\n",
     {"cfg.py:3: parallel: assigned twice (lines 1 and 3)", "", ""}},
    {"parallel = make()", {"cfg.py:1: parallel", "'make(...)': only dict(...) calls are read", ""}},
    {"os = __import__('os')\nparallel = dict()", {"cfg.py:1:", "'__import__(...)'", ""}},
    {"parallel = dict(pipeline=__import__('os').getpid())", {"'__import__(...)'", "", ""}},
    {"fp16 = dict(mode=AMP_TYPE.NAIVE())\nparallel = dict()", {"'AMP_TYPE.NAIVE(...)'", "", ""}},
    {"parallel = dict(pipeline=cfg.PP)", {"parallel", "'cfg.PP' is not a name assigned above", ""}},
    {"parallel = dict(pipeline=PP)\nPP = 2\n", {"'PP' is not a name assigned above", "", ""}},
    {"TP = dict(size=2, mode='1d')\nparallel = dict(tensor=TP)",
     {"cfg.py:2: parallel", "'TP' (line 1) is not a number or string", ""}},
    {"parallel = dict(pipeline=1+1)", {"expected ',' or ')'", "got '+'", ""}},
    {"scale = 2 ** 5\nparallel = dict()",
     {"cfg.py:1:", "expected the end of the line, got '*'", ""}},
    {"x = a[0]\nparallel = dict()", {"cfg.py:1:", "got '['", ""}},
    {"x = 7 // 2\nparallel = dict()", {"unexpected '/'", "", ""}},
    {"parallel = dict(pipeline=0x10)", {"'0x10' is not a decimal number", "", ""}},
    {"parallel = dict(pipeline=010)", {"leading zeros", "", ""}},
    {"x = f'{y}'\nparallel = dict()", {"string prefixes", "", ""}},
    {"x = lambda: 1\nparallel = dict()",
     {"cfg.py:1:", "expected the end of the line, got ':'", ""}},
    {"def f():\n    return 2\nparallel = dict()", {"cfg.py:1:", "expected '=', got 'f'", ""}},
    {"if True:\n    parallel = dict()\n", {"cfg.py:1:", "expected '=', got 'True'", ""}},
    {"from x import (a,\n  b\nparallel = dict()",
     {"cfg.py:1:", "import line's '(' is never closed", ""}},
    {"from x import a)\nparallel = dict()", {"cfg.py:1:", "unbalanced ')' in an import line", ""}},
    {"import 3\nparallel = dict()", {"cfg.py:1:", "expected the end of the line, got '3'", ""}},
    {"= 3\nparallel = dict()", {"cfg.py:1:", "expected NAME = value, got '='", ""}},
    {"import os; os.system('true')\nparallel = dict()", {"cfg.py:1:", "unexpected ';'", ""}},
    {"  parallel = dict()", {"unexpected indent", "", ""}},
    {"parallel.tensor = 3", {"expected '=', got '.'", "", ""}},
    {"parallel = dict(**base)", {"dict(...) takes key=value, got '*'", "", ""}},
    {"parallel = dict(2)", {"dict(...) takes key=value, got '2'", "", ""}},
    {"parallel = dict(pipeline=-)", {"a sign must precede a number", "", ""}},
    {"x = 1 \\ 2\nparallel = dict()", {"a '\\' outside a string must end the line", "", ""}},
    {"\x7f" "ELF\x02\x01\x01", {"cfg.py:1:", "unexpected byte 0x7f", ""}},
    {"parallel = dict()\n\xff\xfe", {"cfg.py:2:", "unexpected byte 0xff", ""}},
};

static void test_bad_inputs(void) {
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        pconfig_t pc;
        perr_t err;
        int rc = parse(BAD[i].text, &pc, &err);
        CHECK(rc == -1, "case %zu: rc %d for:\n%s", i, rc, BAD[i].text);
        CHECK(strstr(err.msg, "cfg.py") != NULL, "case %zu: no file in '%s'", i, err.msg);
        for (int k = 0; k < 3; k++)
            CHECK(strstr(err.msg, BAD[i].frag[k]) != NULL, "case %zu: '%s' not in '%s'", i,
                  BAD[i].frag[k], err.msg);
        CHECK(pc.pp == 0 && pc.tp == 0 && pc.dp == 0, "case %zu: pc changed on failure", i);
    }
}

/* What no Python file holds: NUL bytes, nesting past the limit, flags too. */
static void test_hostile(void) {
    pconfig_t pc;
    perr_t err;
    static const char nul[] = "parallel = dict()\nx = 1\0\nparallel = 2";
    CHECK(parse_n(nul, sizeof nul - 1, &pc, &err) == -1 &&
              strstr(err.msg, "cfg.py:2: unexpected byte 0x00"), "%s", err.msg);
    CHECK(parse_n("parallel = dict('\0')", 19, &pc, &err) == -1 &&
              strstr(err.msg, "control byte 0x00"), "%s", err.msg);
    static char deep[20000];
    static const int depths[] = {32, 33, 5000}; /* 32 levels are read, more refused */
    for (int k = 0; k < 3; k++) {
        const int depth = depths[k];
        size_t n = (size_t)snprintf(deep, sizeof deep, "x = ");
        for (int i = 0; i < depth; i++) deep[n++] = "[({"[i % 2];
        for (int i = depth; i-- > 0;) deep[n++] = "])}"[i % 2];
        n += (size_t)snprintf(deep + n, sizeof deep - n, "\nparallel = dict(pipeline=2)\n");
        int rc = parse_n(deep, n, &pc, &err);
        if (depth <= 32) CHECK(rc == 0 && pc.pp == 2, "depth %d: %s", depth, err.msg);
        else CHECK(rc == -1 && strstr(err.msg, "cfg.py:1: nested deeper than 32 levels"),
                   "depth %d: %s", depth, err.msg);
    }
    CHECK(parse("parallel = dict(tensor=dict(size=(((((((((((((((((((((((((((((((((("
                "2))))))))))))))))))))))))))))))))))))", &pc, &err) == -1 &&
              strstr(err.msg, "parallel: nested deeper"), "%s", err.msg);
    CHECK(colossal_parse(NULL, 0, NULL, &pc, &err) == -1 &&
              strstr(err.msg, "not found in <config>"), "%s", err.msg);
}

/* A degree from a Megatron flag as well as from the file: refused, pc untouched. */
static void test_flag_conflicts(void) {
    static const struct { int pp, tp, dp; const char *frag; } c[] = {
        {0, 2, 0, "parallel.tensor: the layout also comes from --tensor-model-parallel-size"},
        {1, 0, 0, "parallel.pipeline: the layout also comes from --pipeline-model-parallel-size"},
        {0, 0, 2, "cfg.py:2: parallel.data: the layout also comes from --data-parallel-size"},
    };
    for (int i = 0; i < 3; i++) {
        pconfig_t pc;
        perr_t err;
        pconfig_defaults(&pc);
        pc.pp = c[i].pp, pc.tp = c[i].tp, pc.dp = c[i].dp;
        const char *text = "parallel = dict(pipeline=2,\n data=4)";
        CHECK(colossal_parse(text, strlen(text), "cfg.py", &pc, &err) == -1 && strstr(err.msg, c[i].frag),
              "case %d: %s", i, err.msg);
        CHECK(pc.pp == c[i].pp && pc.tp == c[i].tp && pc.dp == c[i].dp, "case %d: pc changed", i);
    }
    pconfig_t pc;
    perr_t err;
    pconfig_defaults(&pc);
    pc.dp = 4; /* --data-parallel-size without data= in the file: fine */
    CHECK(colossal_parse("parallel = dict(pipeline=2)", 27, "cfg.py", &pc, &err) == 0 && pc.dp == 4 && pc.pp == 2,
          "%s", err.msg);
}

int main(void) {
    RUN(test_documented_forms);
    RUN(test_realistic_file);
    RUN(test_names);
    RUN(test_data_reaches_validate);
    RUN(test_sequence_is_the_cp_ring);
    RUN(test_bad_inputs);
    RUN(test_hostile);
    RUN(test_flag_conflicts);
    return harness_done();
}
