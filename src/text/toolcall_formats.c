/*
 * toolcall_formats.c - the table of tool-call and reasoning formats kiln reads, and the detection
 * of a model's format from its chat template.
 *
 * A row says how a model family writes its reply: the markers around reasoning, markers to drop
 * from content (end-of-turn leftovers), the openers that start a block of tool calls (PCRE2
 * patterns, tried in content; see toolcall.h for their groups and flags), which family reads the
 * block (JSON objects, name + JSON arguments, XML parameters, Python-like calls, harmony), and the
 * family's description of the format. Adding a model family that writes like an existing one is a
 * new row; one that writes differently is a row and, when no family fits, a family.
 *
 * Detection looks for the markup a template writes when it renders tools, tool calls or thinking
 * (e.g. "<tool_call>", "[TOOL_CALLS]", "<|channel|>"); the order of the rules matters where
 * templates share markers (Qwen3-Coder's <tool_call><function=...> before Hermes' <tool_call>).
 * A template with none of them gets "generic".
 */
#include "text/toolcall.h"

#include <string.h>
#include <strings.h>

/* ---- family descriptions ------------------------------------------------------------------------- */

static const kn_tc_json_cfg J_NAME_ARGS = {{"name"}, {"arguments", "parameters"}, {"id"}, false, false};
static const kn_tc_json_cfg J_NAME_ARGS_IDLATER = {{"name"}, {"arguments", "parameters"}, {"id"}, false, true};
static const kn_tc_json_cfg J_COHERE = {
    {"tool_name", "name"}, {"parameters", "arguments"}, {"tool_call_id", "id"}, false, false};
static const kn_tc_json_cfg J_NAME_IS_KEY = {{NULL}, {NULL}, {NULL}, true, false};

static const kn_tc_named_cfg N_PLAIN = {-1, -1, NULL, NULL};
static const kn_tc_named_cfg N_DEEPSEEK_R1 = {0, 1, NULL, "<｜tool▁calls▁end｜>"};
static const kn_tc_named_cfg N_DEEPSEEK_V31 = {0, -1, "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
static const kn_tc_named_cfg N_KIMI = {0, -1, "<|tool_call_end|>", "<|tool_calls_section_end|>"};
static const kn_tc_named_cfg N_SOLAR = {0, -1, "<|tool_call:end|>", "<|calls|>"};

static const kn_tc_xml_cfg X_QWEN = {0, "</function>", 1, "</parameter>", "</tool_call>", true};
static const kn_tc_xml_cfg X_SEED = {0, "</function>", 1, "</parameter>", "</seed:tool_call>", true};
static const kn_tc_xml_cfg X_MINIMAX = {0, "</invoke>", 1, "</parameter>", "</minimax:tool_call>", true};
static const kn_tc_xml_cfg X_DSML = {0,    "</｜DSML｜invoke>", 1, "</｜DSML｜parameter>", "</｜DSML｜function_calls>",
                                     false};
static const kn_tc_xml_cfg X_GLM = {0, "</tool_call>", 1, "</arg_value>", NULL, false};

#define THINK                                                                                                          \
    {                                                                                                                  \
        { "<think>", "</think>" }                                                                                      \
    }
#define QWEN_INVOKE "<function=(?<name>[^>\\n]{1,128})>"
#define QWEN_PARAM  "<parameter=(?<key>[^>\\n]{1,128})>"
#define HERMES_JSON "<tool_call>\\s*(?<body>\\{)"
#define HERMES_TAGS                                                                                                    \
    "(?<fence>```(?:json|xml)?\\n\\s*)?(?<tag><(?:tool_call|function_call|tools|tool|response|json|xml|JSON)>)"
#define DEEPSEEK_R1_CALL "(?:<｜tool▁call▁begin｜>)?function<｜tool▁sep｜>(?<name>[^\\n]{1,128})\\n```json\\n"
#define DEEPSEEK_CALL    "<｜tool▁call▁begin｜>(?<name>[^<\\n]{1,128}?)<｜tool▁sep｜>"
#define KIMI_CALL                                                                                                      \
    "<\\|tool_call_begin\\|>\\s*(?<id>(?:functions\\.)?(?<name>[A-Za-z0-9_.\\-]{1,128}?)(?::\\d{1,6})?)\\s*"           \
    "<\\|tool_call_argument_begin\\|>"
#define SOLAR_CALL                                                                                                     \
    "<\\|tool_call:begin\\|>(?<id>[^<]{0,64})<\\|tool_call:name\\|>(?<name>[^<]{1,128})<\\|tool_call:args\\|>"

/* clang-format off */
const kn_tc_format kn_tc_formats[] = {
    {"hermes", "Hermes 2 Pro / 3, Qwen2.5, Qwen3, QwQ, MiMo, Reka, Granite 4, Bielik, SmolLM3: <tool_call>{json}</tool_call>",
     THINK, {NULL},
     {{HERMES_TAGS "\\s*(?<body>\\{)", NULL, NULL, KN_J_OBJECT, 0, NULL},
      {"(?<fence>```(?:json|xml)?\\n)\\s*(?<body>\\{)\\s*\"name\"\\s*:\\s*\"(?:%TOOLS%)\"", NULL, NULL, KN_J_OBJECT, KN_OP_TOOLS, NULL},
      {"(?<body>\\{)\\s*\"name\"\\s*:\\s*\"(?:%TOOLS%)\"", NULL, NULL, KN_J_OBJECT, KN_OP_START | KN_OP_TOOLS, NULL},
      {"<function=(?<name>[^>\\n]{1,128})>", &kn_tc_fam_named, &N_PLAIN, KN_N_CALL, 0, "</function>"},
      {"<function name=\"(?<name>[^\"\\n]{1,128})\">", &kn_tc_fam_named, &N_PLAIN, KN_N_CALL, 0, "</function>"}},
     &kn_tc_fam_json, &J_NAME_ARGS, {NULL}, 0},
    {"qwen3-coder", "Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, Step 3.5: <tool_call><function=f><parameter=k>v</parameter>...",
     THINK, {NULL},
     {{HERMES_JSON, &kn_tc_fam_json, &J_NAME_ARGS, KN_J_OBJECT, 0, "</tool_call>"},
      {"<tool_call>", NULL, NULL, KN_X_BLOCK, 0, NULL},
      {QWEN_INVOKE, NULL, NULL, KN_X_INVOKE, 0, NULL}},
     &kn_tc_fam_xml, &X_QWEN, {QWEN_INVOKE, QWEN_PARAM}, 0},
    {"seed-oss", "ByteDance Seed-OSS: <seed:tool_call><function=f><parameter=k>v</parameter>...",
     {{"<seed:think>", "</seed:think>"}}, {"<seed:eos>"},
     {{"<seed:tool_call>", NULL, NULL, KN_X_BLOCK, 0, NULL}},
     &kn_tc_fam_xml, &X_SEED, {QWEN_INVOKE, QWEN_PARAM}, 0},
    {"minimax-m2", "MiniMax M2: <minimax:tool_call><invoke name=\"f\"><parameter name=\"k\">v</parameter>...",
     THINK, {NULL},
     {{"<minimax:tool_call>", NULL, NULL, KN_X_BLOCK, 0, NULL}},
     &kn_tc_fam_xml, &X_MINIMAX,
     {"<invoke name=\"(?<name>[^\"\\n]{1,128})\">", "<parameter name=\"(?<key>[^\"\\n]{1,128})\">"}, 0},
    {"deepseek-v3.2", "DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter ...",
     THINK, {NULL},
     {{"<｜DSML｜function_calls>", NULL, NULL, KN_X_BLOCK, 0, NULL}},
     &kn_tc_fam_xml, &X_DSML,
     {"<｜DSML｜invoke name=\"(?<name>[^\"\\n]{1,128})\">",
      "<｜DSML｜parameter name=\"(?<key>[^\"\\n]{1,128})\"(?:\\s+string=\"(?<str>true|false)\")?>"}, 0},
    {"glm-4.5", "GLM 4.5, 4.6, 4.7: <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>",
     THINK, {NULL},
     {{"<tool_call>\\s*(?<name>[^<\\n]{1,128})", NULL, NULL, KN_X_INVOKE, 0, NULL}},
     &kn_tc_fam_xml, &X_GLM,
     {"<tool_call>\\s*(?<name>[^<\\n]{1,128})", "<arg_key>(?<key>[^<]{1,128})</arg_key>\\s*<arg_value>"}, 0},
    {"deepseek-r1", "DeepSeek R1 and its distills: <｜tool▁calls▁begin｜>...function<｜tool▁sep｜>f\\n```json...",
     THINK, {NULL},
     {{"<｜tool▁calls▁begin｜>|<｜tool_calls_begin｜>|<｜tool calls begin｜>|<｜tool\\\\_calls\\\\_begin｜>|<｜tool▁calls｜>",
       NULL, NULL, KN_N_BLOCK, 0, NULL},
      {"<｜tool▁call▁begin｜>function<｜tool▁sep｜>(?<name>[^\\n]{1,128})\\n```json\\n", NULL, NULL, KN_N_CALL, 0, NULL}},
     &kn_tc_fam_named, &N_DEEPSEEK_R1, {DEEPSEEK_R1_CALL, "```\\s*<｜tool▁call▁end｜>"}, 0},
    {"deepseek-v3.1", "DeepSeek V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{json}...",
     THINK, {NULL},
     {{"<｜tool▁calls▁begin｜>", NULL, NULL, KN_N_BLOCK, 0, NULL},
      {DEEPSEEK_CALL, NULL, NULL, KN_N_CALL, 0, NULL}},
     &kn_tc_fam_named, &N_DEEPSEEK_V31, {DEEPSEEK_CALL}, 0},
    {"kimi-k2", "Kimi K2 (Instruct, Thinking): <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0...",
     THINK, {NULL},
     {{"<\\|tool_calls_section_begin\\|>", NULL, NULL, KN_N_BLOCK, 0, NULL},
      {KIMI_CALL, NULL, NULL, KN_N_CALL, 0, NULL}},
     &kn_tc_fam_named, &N_KIMI, {KIMI_CALL}, KN_FMT_CALL_ENDS_THINK},
    {"mistral", "Mistral Small 3.2, Devstral, Ministral 3 / Magistral: [TOOL_CALLS]f[CALL_ID]id[ARGS]{json}",
     {{"[THINK]", "[/THINK]"}}, {NULL},
     {{"\\[TOOL_CALLS\\]\\s*(?<name>[^\\[\\]\\s{\"]{1,128})\\s*(?:\\[CALL_ID\\]\\s*(?<id>[A-Za-z0-9_\\-]{1,64})\\s*)?\\[ARGS\\]",
       NULL, NULL, KN_N_CALL, 0, NULL},
      {"\\[TOOL_CALLS\\]\\s*(?<body>\\[)", &kn_tc_fam_json, &J_NAME_ARGS_IDLATER, KN_J_ARRAY, 0, NULL}},
     &kn_tc_fam_named, &N_PLAIN, {NULL}, KN_FMT_ID9},
    {"mistral-nemo", "Mistral Nemo: [TOOL_CALLS][{\"name\", \"arguments\", \"id\"}]",
     {{NULL}}, {NULL},
     {{"\\[TOOL_CALLS\\]\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, NULL}},
     &kn_tc_fam_json, &J_NAME_ARGS_IDLATER, {NULL}, KN_FMT_ID9},
    {"llama3", "Llama 3.1, 3.2, 3.3: {\"name\", \"parameters\"} and <|python_tag|>tool.call(...)",
     {{NULL}}, {"<|eom_id|>", "<|eot_id|>"},
     {{"(?<body>\\{)\\s*(?:\"type\"\\s*:\\s*\"function\"\\s*,\\s*)?\"name\"\\s*:\\s*\"(?:%TOOLS%)\"", NULL, NULL, KN_J_OBJECT,
       KN_OP_START | KN_OP_TOOLS, NULL},
      {"<\\|python_tag\\|>\\s*(?<body>\\{)", NULL, NULL, KN_J_OBJECT, 0, NULL},
      {"<\\|python_tag\\|>\\s*(?<body>[A-Za-z_][A-Za-z0-9_]{0,63}\\s*\\.\\s*call\\s*\\()", &kn_tc_fam_py, NULL, KN_P_DOTCALL,
       0, NULL}},
     &kn_tc_fam_json, &J_NAME_ARGS, {NULL}, 0},
    {"functionary-v3.1", "Functionary v3.1 (Llama 3.1): <function=f>{json}</function>, <|python_tag|>code",
     {{NULL}}, {"<|eom_id|>", "<|eot_id|>"},
     {{"<function=(?<name>[^>\\n]{1,128})>", NULL, NULL, KN_N_CALL, 0, "</function>"},
      {"<\\|python_tag\\|>", NULL, NULL, KN_N_CODE, 0, NULL}},
     &kn_tc_fam_named, &N_PLAIN, {NULL}, 0},
    {"functionary-v3.2", "Functionary v3.2: >>>recipient\\n lines (all: the answer, f: {json}, python: code)",
     {{NULL}}, {NULL},
     {{">>>", &kn_tc_fam_recipient, NULL, 0, 0, NULL}},
     &kn_tc_fam_recipient, NULL, {"(?<name>[A-Za-z0-9_.\\-]{1,128})\\n"}, KN_FMT_RECIPIENT},
    {"firefunction-v2", "Firefunction v2: functools[{\"name\", \"arguments\"}]",
     {{NULL}}, {NULL},
     {{" ?functools\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, NULL}},
     &kn_tc_fam_json, &J_NAME_ARGS, {NULL}, 0},
    {"command-r7b", "Command R7B: <|START_ACTION|>[{\"tool_call_id\", \"tool_name\", \"parameters\"}]<|END_ACTION|>",
     {{"<|START_THINKING|>", "<|END_THINKING|>"}}, {"<|START_RESPONSE|>", "<|END_RESPONSE|>"},
     {{"<\\|START_ACTION\\|>\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, "<|END_ACTION|>"}},
     &kn_tc_fam_json, &J_COHERE, {NULL}, 0},
    {"command-r-plus", "Command R+: Action: ```json [{\"tool_name\", \"parameters\"}] ```",
     {{NULL}}, {NULL},
     {{"Action:\\s*```(?:json)?\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, "```"}},
     &kn_tc_fam_json, &J_COHERE, {NULL}, 0},
    {"granite", "Granite 3.x: <|tool_call|>[{\"name\", \"arguments\"}], <think> and <response>",
     THINK, {"<response>", "</response>"},
     {{"<\\|tool_call\\|>\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, NULL}},
     &kn_tc_fam_json, &J_NAME_ARGS, {NULL}, 0},
    {"gpt-oss", "gpt-oss (harmony): channels analysis (reasoning), commentary to=functions.f (calls), final",
     {{NULL}}, {"<|end|>", "<|return|>", "<|call|>"},
     {{"<\\|channel\\|>", &kn_tc_fam_harmony, NULL, 0, KN_OP_ALWAYS, NULL},
      {"<\\|start\\|>", &kn_tc_fam_harmony, NULL, 1, KN_OP_ALWAYS, NULL}},
     &kn_tc_fam_harmony, NULL, {NULL}, KN_FMT_HARMONY},
    {"lfm2", "LFM2, LFM2.5: <|tool_call_start|>[f(k=v)]<|tool_call_end|>, or a bare [f(k=v)]",
     THINK, {NULL},
     {{"<\\|tool_call_start\\|>\\s*\\[", NULL, NULL, KN_P_LIST, 0, "<|tool_call_end|>"},
      {"\\[(?<body>(?:%TOOLS%)\\s*\\()", NULL, NULL, KN_P_LIST, KN_OP_START | KN_OP_TOOLS, NULL}},
     &kn_tc_fam_py, NULL, {NULL}, 0},
    {"gemma4", "Gemma 4: <|tool_call>call:f{k:<|\"|>v<|\"|>}<tool_call|>, <|channel>thought...<channel|>",
     {{"<|channel>thought", "<channel|>"}}, {"<channel|>", "<turn|>"},
     {{"<\\|tool_call>call:(?<name>[A-Za-z0-9_.\\-]{1,128})(?<body>\\{)", NULL, NULL, 0, 0, NULL}},
     &kn_tc_fam_gemma, NULL, {NULL}, 0},
    {"apertus", "Apertus: <|tools_prefix|>[{\"f\": {args}}]<|tools_suffix|>",
     {{"<|inner_prefix|>", "<|inner_suffix|>"}}, {NULL},
     {{"<\\|tools_prefix\\|>\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, "<|tools_suffix|>"}},
     &kn_tc_fam_json, &J_NAME_IS_KEY, {NULL}, 0},
    {"apriel", "Apriel 1.5, 1.6: <tool_calls>[{\"name\", \"arguments\"}]</tool_calls>, [BEGIN FINAL RESPONSE]",
     {{"<thinking>", "</thinking>"}, {"Here are my reasoning steps:\n", "[BEGIN FINAL RESPONSE]"}},
     {"[BEGIN FINAL RESPONSE]", "[END FINAL RESPONSE]", "<|end|>"},
     {{"<tool_calls>\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, "</tool_calls>"}},
     &kn_tc_fam_json, &J_NAME_ARGS, {NULL}, 0},
    {"nemotron-v2", "Nemotron Nano v2: <TOOLCALL>[{\"name\", \"arguments\"}]</TOOLCALL>",
     THINK, {"<SPECIAL_12>"},
     {{"<TOOLCALL>\\s*(?<body>\\[)", NULL, NULL, KN_J_ARRAY, 0, "</TOOLCALL>"}},
     &kn_tc_fam_json, &J_NAME_ARGS, {NULL}, 0},
    {"gigachat3", "GigaChat 3, 3.1: <|function_call|>{json} or function call<|role_sep|>{json}",
     {{NULL}}, {NULL},
     {{"<\\|function_call\\|>\\s*(?<body>\\{)", NULL, NULL, KN_J_OBJECT, 0, NULL},
      {"(?:<\\|message_sep\\|>\\s*)?function call<\\|role_sep\\|>\\s*(?<body>\\{)", NULL, NULL, KN_J_OBJECT, 0, NULL}},
     &kn_tc_fam_json, &J_NAME_ARGS, {NULL}, 0},
    {"solar-open", "Solar Open: <|tool_calls|><|tool_call:begin|>id<|tool_call:name|>f<|tool_call:args|>{json}...",
     {{"<|think|>", "<|end|>"}}, {"<|begin|>assistant", "<|content|>", "<|end|>", "<|flush|>"},
     {{"<\\|tool_calls\\|>", NULL, NULL, KN_N_BLOCK, 0, NULL},
      {SOLAR_CALL, NULL, NULL, KN_N_CALL, 0, NULL}},
     &kn_tc_fam_named, &N_SOLAR, {SOLAR_CALL}, 0},
    {"generic", "templates without tool markup: the reply is {\"tool_calls\": [...]} or {\"response\": \"...\"}",
     THINK, {NULL},
     {{"(?<body>\\{)\\s*\"(?:tool_calls?|response)\"\\s*:", NULL, NULL, KN_J_ENVELOPE, KN_OP_START | KN_OP_TOOLS, NULL}},
     &kn_tc_fam_json, &J_NAME_ARGS_IDLATER, {NULL}, 0},
};
/* clang-format on */

const size_t kn_tc_n_formats = sizeof kn_tc_formats / sizeof kn_tc_formats[0];

/* Other names a format is known by (llama.cpp's and the model families'). */
static const struct {
    const char *alias, *name;
} ALIASES[] = {
    {"hermes-2-pro", "hermes"},
    {"qwen2.5", "hermes"},
    {"qwen3", "hermes"},
    {"qwq", "hermes"},
    {"qwen3-xml", "qwen3-coder"},
    {"qwen3.5", "qwen3-coder"},
    {"nemotron-v3", "qwen3-coder"},
    {"step-3.5", "qwen3-coder"},
    {"glm", "glm-4.5"},
    {"kimi", "kimi-k2"},
    {"llama-3.x", "llama3"},
    {"llama3.1", "llama3"},
    {"mistral-small", "mistral"},
    {"devstral", "mistral"},
    {"magistral", "mistral"},
    {"harmony", "gpt-oss"},
    {"deepseek", "deepseek-r1"},
    {"command-r", "command-r7b"},
    {"functionary", "functionary-v3.2"},
    {"gemma", "gemma4"},
    {"reka", "hermes"},
    {"none", "generic"},
};

const kn_tc_format *kn_tc_format_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < kn_tc_n_formats; i++)
        if (strcasecmp(kn_tc_formats[i].name, name) == 0) return &kn_tc_formats[i];
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (strcasecmp(ALIASES[i].alias, name) == 0) return kn_tc_format_find(ALIASES[i].name);
    return NULL;
}

static bool has(const char *t, const char *s) { return strstr(t, s) != NULL; }

/* The name of the format a template writes (see the file comment). */
static const char *detect(const char *t) {
    if (has(t, "<|channel|>")) return "gpt-oss";
    if (has(t, ">>>all")) return "functionary-v3.2";
    if (has(t, "<|tool_calls_section_begin|>")) return "kimi-k2";
    if (has(t, "dsml_token") || has(t, "｜DSML｜")) return "deepseek-v3.2";
    if (has(t, "<|tool_call>") || has(t, "<|channel>")) return "gemma4";
    if (has(t, "<seed:tool_call>") || has(t, "<seed:think>")) return "seed-oss";
    if (has(t, "<minimax:tool_call>")) return "minimax-m2";
    if (has(t, "<arg_key>")) return "glm-4.5";
    if (has(t, "<function=") && has(t, "<parameter=")) return "qwen3-coder";
    if (has(t, "<｜tool▁calls▁begin｜>") || has(t, "<｜Assistant｜>")) {
        if (has(t, "```json") || !has(t, "<｜tool▁sep｜>")) return "deepseek-r1";
        return "deepseek-v3.1";
    }
    if (has(t, "[TOOL_CALLS]")) return has(t, "[ARGS]") ? "mistral" : "mistral-nemo";
    if (has(t, "<|START_ACTION|>")) return "command-r7b";
    if (has(t, "<|START_OF_TURN_TOKEN|>") && has(t, "Action:")) return "command-r-plus";
    if (has(t, "<|tool_call_start|>") || has(t, "<|tool_list_start|>") || has(t, "List of tools: [")) return "lfm2";
    if (has(t, "<|tools_prefix|>")) return "apertus";
    if (has(t, "<tool_calls>") || has(t, "[BEGIN FINAL RESPONSE]")) return "apriel";
    if (has(t, "<TOOLCALL>")) return "nemotron-v2";
    if (has(t, "<|function_call|>") || has(t, "<|role_sep|>")) return "gigachat3";
    if (has(t, "<|tool_call:begin|>")) return "solar-open";
    if (has(t, "functools[")) return "firefunction-v2";
    if (has(t, "<|start_header_id|>") && has(t, "<function=")) return "functionary-v3.1";
    if (has(t, "<|start_header_id|>") && (has(t, "<|python_tag|>") || has(t, "ipython") || has(t, "tools")))
        return "llama3";
    if (has(t, "<|tool_call|>")) return "granite";
    if (has(t, "<tool_call>") || (has(t, "<think>") && has(t, "<|im_start|>"))) return "hermes";
    return "generic";
}

const kn_tc_format *kn_tc_format_detect(const char *tmpl) { return kn_tc_format_find(tmpl ? detect(tmpl) : "generic"); }

/* ---- public ------------------------------------------------------------------------------------- */

const char *kiln_chat_format_detect(const char *tmpl) { return kn_tc_format_detect(tmpl)->name; }

bool kiln_chat_format_renders_special(const char *format) {
    if (!format) return false;
    return strcmp(format, "hermes") != 0 && strcmp(format, "qwen3-coder") != 0 && strcmp(format, "generic") != 0;
}

bool kiln_chat_format_get(size_t i, const char **name, const char **models) {
    if (i >= kn_tc_n_formats) return false;
    if (name) *name = kn_tc_formats[i].name;
    if (models) *models = kn_tc_formats[i].models;
    return true;
}
