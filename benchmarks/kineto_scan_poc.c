#define _GNU_SOURCE
/* Measurement only, not part of traceparse (issue 28, kjson3; driven by
   benchmarks/kineto_json_readers.py --native): one pass over a Chrome-trace JSON document
   recording, per event of traceEvents, the byte span of each wanted key's value (keys of
   the event, and keys of its "args" object), then gathering one key's spans into an Arrow
   string column. It validates almost nothing (no UTF-8 check, no number grammar, keys
   with escapes never match): it is a lower bound for a native columnar extractor, not one. */
#include <stdint.h>
#include <string.h>
#include <stddef.h>

static const char *P, *E;
static const unsigned char STRUCT[256] = {['"'] = 1, ['{'] = 1, ['}'] = 1, ['['] = 1, [']'] = 1};
static void ws(void) { while (P < E && (*P == ' ' || *P == '\n' || *P == '\r' || *P == '\t')) P++; }
static int skip_string(void) { /* P at '"' */
    P++;
    while (P < E) {
        const char *q = memchr(P, '"', E - P);
        if (!q) return -1;
        const char *b = q; int bs = 0;
        while (b > P && b[-1] == '\\') { b--; bs++; }
        P = q + 1;
        if (!(bs & 1)) return 0;
    }
    return -1;
}
static int skip_value(void) {
    ws(); if (P >= E) return -1;
    char c = *P;
    if (c == '"') return skip_string();
    if (c == '{' || c == '[') {
        int depth = 0;
        while (P < E) {
            while (P < E && !STRUCT[(unsigned char)*P]) P++;
            if (P >= E) return -1;
            c = *P;
            if (c == '"') { if (skip_string()) return -1; continue; }
            if (c == '{' || c == '[') depth++;
            else { depth--; if (!depth) { P++; return 0; } }
            P++;
        }
        return -1;
    }
    while (P < E && *P != ',' && *P != '}' && *P != ']' && *P != ' ' && *P != '\n') P++;
    return 0;
}
static int find_key(const char *k, size_t n, const char **keys, const int *lens, int nk) {
    for (int i = 0; i < nk; i++) if ((size_t)lens[i] == n && !memcmp(keys[i], k, n)) return i;
    return -1;
}
/* out[(ev * (ntop + nargs) + key) * 2 + {0,1}] = start, length (-1 when absent).
   returns events, or -1 on a shape it does not handle. */
long scan(const char *buf, size_t n, const char **top, const int *toplen, int ntop,
          const char **akeys, const int *alen, int nargs, int32_t *out, long maxev) {
    P = buf; E = buf + n;
    const char *t = memmem(buf, n, "\"traceEvents\"", 13);
    if (!t) return -1;
    P = t + 13; ws(); if (*P != ':') return -1; P++; ws(); if (*P != '[') return -1; P++;
    int stride = ntop + nargs; long ev = 0; int args_i = find_key("args", 4, top, toplen, ntop);
    for (;;) {
        ws(); if (*P == ']') break;
        if (*P != '{') return -1;
        if (ev >= maxev) return -1;
        int32_t *row = out + ev * stride * 2;
        for (int i = 0; i < stride * 2; i++) row[i] = -1;
        P++;
        for (;;) {
            ws(); if (*P == '}') { P++; break; }
            if (*P != '"') return -1;
            const char *k = P + 1; if (skip_string()) return -1; size_t kl = P - 1 - k;
            ws(); if (*P != ':') return -1; P++; ws();
            int i = find_key(k, kl, top, toplen, ntop);
            if (i == args_i && *P == '{') {
                row[i * 2] = P - buf; const char *s = P; P++;
                for (;;) {
                    ws(); if (*P == '}') { P++; break; }
                    if (*P != '"') return -1;
                    const char *ak = P + 1; if (skip_string()) return -1; size_t al = P - 1 - ak;
                    ws(); if (*P != ':') return -1; P++; ws();
                    int j = find_key(ak, al, akeys, alen, nargs);
                    const char *vs = P; if (skip_value()) return -1;
                    if (j >= 0) { row[(ntop + j) * 2] = vs - buf; row[(ntop + j) * 2 + 1] = P - vs; }
                    ws(); if (*P == ',') P++;
                }
                row[i * 2 + 1] = P - s;
            } else {
                const char *vs = P; if (skip_value()) return -1;
                if (i >= 0) { row[i * 2] = vs - buf; row[i * 2 + 1] = P - vs; }
            }
            ws(); if (*P == ',') P++;
        }
        ev++;
        ws(); if (*P == ',') P++;
    }
    return ev;
}
/* concatenate spans (start, len pairs with the given stride) into dst; offsets[i+1] end;
   absent (-1) spans are empty and marked in valid[]. */
long gather(const char *buf, const int32_t *spans, long n, int stride, char *dst, int32_t *offsets, uint8_t *valid, int mode, long *odd) {
    long o = 0; offsets[0] = 0; *odd = 0;
    for (long i = 0; i < n; i++) {
        int32_t s = spans[i * stride], l = spans[i * stride + 1];
        if (s < 0) { valid[i] = 0; offsets[i + 1] = o; continue; }
        valid[i] = 1;
        const char *v = buf + s;
        if (mode == 1) {
            if (l >= 2 && v[0] == '"') { v++; l -= 2; if (memchr(v, '\\', l)) (*odd)++; }
            else (*odd)++;
            memcpy(dst + o, v, l); o += l;
        } else if (mode == 2) {
            int in = 0;
            for (int32_t j = 0; j < l; j++) {
                char c = v[j];
                if (in) { dst[o++] = c; if (c == '\\') { (*odd)++; } else if (c == '"') in = 0; }
                else if (c == '"') { in = 1; dst[o++] = c; }
                else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') { dst[o++] = c; if (c == '.' || c == 'e' || c == 'E') (*odd)++; }
            }
        } else { memcpy(dst + o, v, l); o += l; }
        offsets[i + 1] = o;
    }
    return o;
}
/* Each span as an int64 (a plain decimal integer); valid[i] 0 when absent, and counted in
   the return value when present but not a plain integer (a caller would fall back). */
long to_int(const char *buf, const int32_t *spans, long n, int stride, int64_t *out,
            uint8_t *valid) {
    long odd = 0;
    for (long i = 0; i < n; i++) {
        int32_t s = spans[i * stride], l = spans[i * stride + 1];
        valid[i] = 0; out[i] = 0;
        if (s < 0) continue;
        const char *v = buf + s; int neg = 0; int32_t j = 0; int64_t x = 0;
        if (l && v[0] == '-') { neg = 1; j = 1; }
        if (j >= l || l - j > 18) { odd++; continue; }
        for (; j < l; j++) { char c = v[j]; if (c < '0' || c > '9') break; x = x * 10 + (c - '0'); }
        if (j != l) { odd++; continue; }
        out[i] = neg ? -x : x; valid[i] = 1;
    }
    return odd;
}
/* Exact ns of decimal microsecond text with at most 3 decimals (a tie-free case: anything
   else, exponents included, is counted as odd and left invalid). */
long us_to_ns(const char *buf, const int32_t *spans, long n, int stride, int64_t *out,
              uint8_t *valid) {
    long odd = 0;
    for (long i = 0; i < n; i++) {
        int32_t s = spans[i * stride], l = spans[i * stride + 1];
        valid[i] = 0; out[i] = 0;
        if (s < 0) continue;
        const char *v = buf + s; int neg = 0; int32_t j = 0; int64_t x = 0; int frac = -1;
        int digits = 0;
        if (l && v[0] == '-') { neg = 1; j = 1; }
        for (; j < l; j++) {
            char c = v[j];
            if (c == '.' && frac < 0) { frac = 0; continue; }
            if (c < '0' || c > '9' || frac >= 3) break;
            x = x * 10 + (c - '0'); digits++; if (frac >= 0) frac++;
        }
        if (j != l || !digits || digits > 18) { odd++; continue; }
        int over = 0;
        for (int k = frac < 0 ? 0 : frac; k < 3; k++) over |= __builtin_mul_overflow(x, 10, &x);
        if (over) { odd++; continue; }
        out[i] = neg ? -x : x; valid[i] = 1;
    }
    return odd;
}
