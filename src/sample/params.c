/*
 * params.c - the sampling parameters: the one table of their ranges and defaults
 * (kiln_sampler_param_range in kiln.h, where the choice of each range is written down), the
 * defaults built from it, the checked setter front ends use, and the validation of a whole
 * kiln_sampler_params (kn_sampler_check) against the same rows.
 */
#include "sample/sampler.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define TOP_K_MAX          (1 << 30)
#define PENALTY_WINDOW_MAX (1 << 20)

typedef struct param_row {
    kiln_sampler_range r;
    size_t offset; /* of the field in kiln_sampler_params: a float, or an int32_t when r.integer */
} param_row;

#define FIELD(f) offsetof(kiln_sampler_params, f)

static const param_row rows[KILN_SAMPLER_PARAM_COUNT] = {
    [KILN_SAMPLER_TEMPERATURE] = {{"temperature", 0, 2, 0.8, false}, FIELD(temperature)},
    [KILN_SAMPLER_TOP_K] = {{"top_k", 0, TOP_K_MAX, 40, true}, FIELD(top_k)},
    [KILN_SAMPLER_TOP_P] = {{"top_p", 0, 1, 0.95, false}, FIELD(top_p)},
    [KILN_SAMPLER_MIN_P] = {{"min_p", 0, 1, 0.05, false}, FIELD(min_p)},
    [KILN_SAMPLER_REPEAT_PENALTY] = {{"repeat_penalty", 0.001, 100, 1, false}, FIELD(repeat_penalty)},
    [KILN_SAMPLER_PRESENCE_PENALTY] = {{"presence_penalty", -2, 2, 0, false}, FIELD(presence_penalty)},
    [KILN_SAMPLER_FREQUENCY_PENALTY] = {{"frequency_penalty", -2, 2, 0, false}, FIELD(frequency_penalty)},
    [KILN_SAMPLER_PENALTY_LAST_N] = {{"penalty_last_n", 0, PENALTY_WINDOW_MAX, 64, true}, FIELD(penalty_last_n)},
};

#undef FIELD

/* Stores v (already checked) into the field of row in p. */
static void put(kiln_sampler_params *p, const param_row *row, double v) {
    char *f = (char *)p + row->offset;
    if (row->r.integer) {
        const int32_t i = (int32_t)v;
        memcpy(f, &i, sizeof i);
    } else {
        const float x = (float)v;
        memcpy(f, &x, sizeof x);
    }
}

/* Whether the field of row in p lies in the row's range. A float field is compared with the
 * range's ends rounded to float, so every value a front end accepted and stored as float passes. */
static bool field_ok(const kiln_sampler_params *p, const param_row *row) {
    const char *f = (const char *)p + row->offset;
    if (row->r.integer) {
        int32_t i;
        memcpy(&i, f, sizeof i);
        return i >= row->r.min && i <= row->r.max;
    }
    float x;
    memcpy(&x, f, sizeof x);
    return x >= (float)row->r.min && x <= (float)row->r.max; /* false for NaN */
}

kiln_sampler_params kiln_sampler_default_params(void) {
    kiln_sampler_params p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < KILN_SAMPLER_PARAM_COUNT; i++) put(&p, &rows[i], rows[i].r.def);
    p.seed = KILN_SEED_RANDOM;
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    return p;
}

const kiln_sampler_range *kiln_sampler_param_range(kiln_sampler_param param) {
    return (unsigned)param < KILN_SAMPLER_PARAM_COUNT ? &rows[param].r : NULL;
}

kiln_status kiln_sampler_param_set(kiln_sampler_params *params, kiln_sampler_param param, double value) {
    kn_error_clear();
    if (!params) return kn_error(KILN_ERR_INVALID_ARG, "kiln_sampler_param_set: params is NULL");
    if ((unsigned)param >= KILN_SAMPLER_PARAM_COUNT)
        return kn_error(KILN_ERR_INVALID_ARG, "unknown sampling parameter %d", (int)param);
    const param_row *row = &rows[param];
    if (!(value >= row->r.min && value <= row->r.max) || (row->r.integer && value != floor(value)))
        return kn_error(KILN_ERR_INVALID_ARG, "%s must be %s in [%g, %g], got %g", row->r.name,
                        row->r.integer ? "an integer" : "a number", row->r.min, row->r.max, value);
    put(params, row, value);
    return KILN_OK;
}

kiln_status kn_sampler_check(const kiln_sampler_params *p, int32_t n_vocab) {
    for (int i = 0; i < KILN_SAMPLER_PARAM_COUNT; i++)
        if (!field_ok(p, &rows[i]))
            return kn_error(KILN_ERR_INVALID_ARG, "%s must be in [%g, %g]", rows[i].r.name, rows[i].r.min,
                            rows[i].r.max);
    if (p->n_logit_bias && !p->logit_bias) return kn_error(KILN_ERR_INVALID_ARG, "logit_bias is NULL");
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab)
            return kn_error(KILN_ERR_INVALID_ARG, "logit_bias token %d is outside the vocabulary [0, %d)",
                            p->logit_bias[i].token, n_vocab);
        if (isnan(p->logit_bias[i].bias))
            return kn_error(KILN_ERR_INVALID_ARG, "logit_bias for token %d is NaN", p->logit_bias[i].token);
    }
    return KILN_OK;
}
