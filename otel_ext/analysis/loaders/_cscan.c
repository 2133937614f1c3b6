/*
 * otel_ext.analysis.loaders._cscan: compiled column extractors for Kineto trace events and
 * OTLP-JSON spans and metric points (see the OTLP sections below).
 *
 * scan(buf, start, stop, final, limit_ns) reads the events of a piece of a Kineto document's
 * "traceEvents" array straight from its JSON bytes and returns the columns the fast loader
 * needs (see _kineto_fast.Accumulator.add_scanned), with no Python object per event:
 *
 *   - non-final mode: buf[start:stop] is a run of complete events separated by commas (what
 *     the loader cuts off the front of its buffer); it must be exactly that;
 *   - final mode: buf[start:stop] holds the last events followed by the closing "]" and
 *     whatever follows it; the position of that "]" is returned.
 *
 * It validates the JSON it reads strictly (grammar, UTF-8, escapes, nesting) and returns None
 * -- "take the msgspec path for this piece" -- on anything it is not sure to read exactly as
 * msgspec would: malformed JSON, an unknown or missing "ph", a field of an unexpected type,
 * times in exponent form or beyond limit_ns, integers beyond int64, duplicate or escaped keys
 * among the members it reads, lone surrogates, nesting deeper than 64. It never raises on
 * input data (only on wrong argument types) and checks every read against the buffer's end.
 *
 * Times are converted exactly from their decimal text: microseconds with any number of
 * fractional digits to integer nanoseconds, rounding half away from zero below the
 * nanosecond (as otel_ext.analysis.loaders._common.us_to_ns does).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define LIM62 ((int64_t)1 << 62)

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *data;
    size_t len, cap;
} Vec;

static int vec_reserve(Vec *v, size_t extra) {
    if (extra > SIZE_MAX / 2 - v->len) return 0;
    if (v->len + extra <= v->cap) return 1;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->len + extra) cap *= 2;
    char *d = (char *)realloc(v->data, cap);
    if (!d) return 0;
    v->data = d;
    v->cap = cap;
    return 1;
}

static int vec_push(Vec *v, const void *p, size_t n) {
    if (!vec_reserve(v, n)) return 0;
    if (n) memcpy(v->data + v->len, p, n);
    v->len += n;
    return 1;
}

static int push_i64(Vec *v, int64_t x) { return vec_push(v, &x, sizeof x); }
static int push_i32(Vec *v, int32_t x) { return vec_push(v, &x, sizeof x); }
static int push_u8(Vec *v, uint8_t x) { return vec_push(v, &x, sizeof x); }

static void vec_free(Vec *v) {
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

/* ------------------------------------------------------------------ string dictionary */

typedef struct {
    uint64_t hash;
    int32_t code; /* -1: empty */
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, count;
    Vec arena;   /* the distinct strings' bytes, one after the other */
    Vec entries; /* per code: (offset, length) into arena, as two size_t */
} Dict;

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 0x243F6A8885A308D3ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n) memcpy(&w, s, n);
    h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 32;
    return h;
}

static int dict_grow(Dict *d) {
    size_t cap = d->cap ? d->cap * 2 : 64;
    Slot *s = (Slot *)malloc(cap * sizeof(Slot));
    if (!s) return 0;
    for (size_t i = 0; i < cap; i++) s[i].code = -1;
    for (size_t i = 0; i < d->cap; i++) {
        if (d->slots[i].code < 0) continue;
        size_t j = (size_t)d->slots[i].hash & (cap - 1);
        while (s[j].code >= 0) j = (j + 1) & (cap - 1);
        s[j] = d->slots[i];
    }
    free(d->slots);
    d->slots = s;
    d->cap = cap;
    return 1;
}

/* The code of a string (first-seen order), or -1 when out of memory. */
static int32_t dict_code(Dict *d, const unsigned char *s, size_t n) {
    if ((d->count + 1) * 2 > d->cap && !dict_grow(d)) return -1;
    uint64_t h = hash_bytes(s, n);
    size_t j = (size_t)h & (d->cap - 1);
    const size_t *ent;
    for (;;) {
        Slot *sl = &d->slots[j];
        if (sl->code < 0) break;
        if (sl->hash == h) {
            ent = (const size_t *)d->entries.data + 2 * (size_t)sl->code;
            if (ent[1] == n && memcmp(d->arena.data + ent[0], s, n) == 0) return sl->code;
        }
        j = (j + 1) & (d->cap - 1);
    }
    if (d->count >= INT32_MAX) return -1;
    size_t e[2] = {d->arena.len, n};
    if (!vec_push(&d->arena, s, n) || !vec_push(&d->entries, e, sizeof e)) return -1;
    d->slots[j].hash = h;
    d->slots[j].code = (int32_t)d->count;
    return (int32_t)d->count++;
}

static void dict_free(Dict *d) {
    free(d->slots);
    d->slots = NULL;
    vec_free(&d->arena);
    vec_free(&d->entries);
}

static PyObject *dict_list(Dict *d) {
    PyObject *list = PyList_New((Py_ssize_t)d->count);
    if (!list) return NULL;
    for (size_t i = 0; i < d->count; i++) {
        const size_t *ent = (const size_t *)d->entries.data + 2 * i;
        PyObject *s = PyUnicode_DecodeUTF8(d->arena.data + ent[0], (Py_ssize_t)ent[1], "strict");
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

/* ------------------------------------------------------------------ JSON scanning */

typedef struct {
    const unsigned char *base, *p, *end;
    int depth;
    Vec scratch; /* decoded text of strings with escapes */
} Parser;

enum { K_NONE = 0, K_STR, K_NUM, K_TRUE, K_FALSE, K_NULL, K_ARR, K_OBJ };

typedef struct {
    const unsigned char *s; /* raw text between the quotes */
    size_t n;
    int esc;
} Str;

typedef struct {
    int neg, is_int, exp, big;
    const unsigned char *ip, *fp; /* integer and fraction digits */
    size_t ni, nf;
    int64_t value; /* when is_int and not big */
} Num;

typedef struct {
    int kind;
    const unsigned char *start, *stop; /* the value's text */
    Str str;
    Num num;
} Val;

/* 1 for the bytes a string may hold without a closer look */
static unsigned char plain[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) plain[c] = (c >= 0x20 && c < 0x80 && c != '"' && c != '\\');
}

static void skip_ws(Parser *P) {
    while (P->p < P->end) {
        unsigned char c = *P->p;
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        P->p++;
    }
}

static int hex4(const unsigned char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static int cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* A string starting at the opening quote: checked (escapes, UTF-8, control characters). */
static int scan_string(Parser *P, Str *out) {
    const unsigned char *p = P->p + 1, *end = P->end;
    out->s = p;
    out->esc = 0;
    for (;;) {
        while (end - p >= 4 && (plain[p[0]] & plain[p[1]] & plain[p[2]] & plain[p[3]])) p += 4;
        while (p < end && plain[*p]) p++;
        if (p >= end) return 0;
        unsigned char c = *p;
        if (c == '"') break;
        if (c == '\\') {
            out->esc = 1;
            if (end - p < 2) return 0;
            unsigned char e = p[1];
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                e == 'r' || e == 't') {
                p += 2;
            } else if (e == 'u') {
                unsigned cp, lo;
                if (end - p < 6 || !hex4(p + 2, &cp)) return 0;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return 0;
                    p += 12;
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return 0;
                } else {
                    p += 6;
                }
            } else {
                return 0;
            }
        } else if (c < 0x20) {
            return 0;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (end - p < 2 || !cont(p[1])) return 0;
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (end - p < 3 || !cont(p[1]) || !cont(p[2])) return 0;
            if (c == 0xE0 && p[1] < 0xA0) return 0;
            if (c == 0xED && p[1] > 0x9F) return 0;
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (end - p < 4 || !cont(p[1]) || !cont(p[2]) || !cont(p[3])) return 0;
            if (c == 0xF0 && p[1] < 0x90) return 0;
            if (c == 0xF4 && p[1] > 0x8F) return 0;
            p += 4;
        } else {
            return 0;
        }
    }
    out->n = (size_t)(p - out->s);
    P->p = p + 1;
    return 1;
}

static int put_utf8(Vec *v, unsigned cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | (cp >> 18));
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return vec_push(v, b, n);
}

/* The UTF-8 text of a checked string (its raw bytes when it has no escapes). */
static int string_text(Parser *P, const Str *s, const unsigned char **text, size_t *n) {
    if (!s->esc) {
        *text = s->s;
        *n = s->n;
        return 1;
    }
    Vec *v = &P->scratch;
    v->len = 0;
    const unsigned char *p = s->s, *end = s->s + s->n;
    while (p < end) {
        const unsigned char *q = p;
        while (q < end && *q != '\\') q++;
        if (!vec_push(v, p, (size_t)(q - p))) return 0;
        if (q >= end) break;
        /* checked by scan_string: a complete escape follows */
        unsigned char e = q[1];
        unsigned cp, lo;
        char c;
        switch (e) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': c = 0; break;
            default: c = (char)e; break;
        }
        if (e != 'u') {
            if (!vec_push(v, &c, 1)) return 0;
            p = q + 2;
            continue;
        }
        if (end - q < 6 || !hex4(q + 2, &cp)) return 0;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - q < 12 || !hex4(q + 8, &lo)) return 0;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p = q + 12;
        } else {
            p = q + 6;
        }
        if (!put_utf8(v, cp)) return 0;
    }
    *text = (const unsigned char *)v->data;
    *n = v->len;
    return 1;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int scan_number(Parser *P, Num *out) {
    const unsigned char *p = P->p, *end = P->end;
    memset(out, 0, sizeof *out);
    if (p < end && *p == '-') {
        out->neg = 1;
        p++;
    }
    if (p >= end || !is_digit(*p)) return 0;
    out->ip = p;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && is_digit(*p)) p++;
    }
    out->ni = (size_t)(p - out->ip);
    if (p < end && *p == '.') {
        p++;
        out->fp = p;
        while (p < end && is_digit(*p)) p++;
        out->nf = (size_t)(p - out->fp);
        if (out->nf == 0) return 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return 0;
        while (p < end && is_digit(*p)) p++;
        out->exp = 1;
    }
    out->is_int = !out->fp && !out->exp;
    if (out->is_int) {
        if (out->ni > 19) {
            out->big = 1;
        } else {
            uint64_t v = 0;
            for (size_t i = 0; i < out->ni; i++) v = v * 10 + (uint64_t)(out->ip[i] - '0');
            /* 19 digits stay below 2**64 */
            uint64_t lim = out->neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
            if (v > lim)
                out->big = 1;
            else
                out->value = out->neg ? (int64_t)(0 - v) : (int64_t)v;
        }
    }
    P->p = p;
    return 1;
}

/* Microseconds as written to nanoseconds; 0 when not a plain decimal or not under limit. */
static int num_to_ns(const Num *n, int64_t limit, int64_t *out) {
    if (n->exp || n->ni > 18) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n->ni; i++) v = v * 10 + (uint64_t)(n->ip[i] - '0');
    if (v > (uint64_t)INT64_MAX / 1000) return 0;
    v *= 1000;
    uint64_t frac = 0;
    for (size_t i = 0; i < 3; i++) frac = frac * 10 + (i < n->nf ? (uint64_t)(n->fp[i] - '0') : 0);
    v += frac;
    if (n->nf > 3 && n->fp[3] >= '5') v += 1; /* half away from zero below the ns */
    if (v >= (uint64_t)limit) return 0;
    *out = n->neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

static int skip_value(Parser *P);

static int match_lit(Parser *P, const char *lit, size_t n) {
    if ((size_t)(P->end - P->p) < n || memcmp(P->p, lit, n) != 0) return 0;
    P->p += n;
    return 1;
}

/* Any value, captured shallowly (strings and numbers in full, containers skipped). */
static int scan_value(Parser *P, Val *v) {
    if (P->p >= P->end) return 0;
    v->start = P->p;
    unsigned char c = *P->p;
    int ok;
    switch (c) {
        case '"': v->kind = K_STR; ok = scan_string(P, &v->str); break;
        case '{': v->kind = K_OBJ; ok = skip_value(P); break;
        case '[': v->kind = K_ARR; ok = skip_value(P); break;
        case 't': v->kind = K_TRUE; ok = match_lit(P, "true", 4); break;
        case 'f': v->kind = K_FALSE; ok = match_lit(P, "false", 5); break;
        case 'n': v->kind = K_NULL; ok = match_lit(P, "null", 4); break;
        default:
            v->kind = K_NUM;
            ok = (c == '-' || is_digit(c)) && scan_number(P, &v->num);
    }
    v->stop = P->p;
    return ok;
}

/* The walk over a container's elements, shared by every container reader:
 *
 *     int r = enter(P, '[', ']');
 *     while (r == W_NEXT) { ...one element...; r = next_or_close(P, ']'); }
 *     return r == W_DONE;
 */
enum { W_BAD = 0, W_NEXT = 1, W_DONE = 2 };

/* Into the container that open starts at P->p: W_NEXT before its first element, W_DONE
 * past it when it is empty, W_BAD when it is not there or nests too deep. */
static inline int enter(Parser *P, unsigned char open, unsigned char close) {
    if (P->p >= P->end || *P->p != open) return W_BAD;
    if (++P->depth > MAX_DEPTH) return W_BAD;
    P->p++;
    skip_ws(P);
    if (P->p < P->end && *P->p == close) {
        P->p++;
        P->depth--;
        return W_DONE;
    }
    return W_NEXT;
}

/* After an element: W_NEXT past a ',' (another element follows), W_DONE past the
 * container's close, W_BAD on anything else. */
static inline int next_or_close(Parser *P, unsigned char close) {
    skip_ws(P);
    if (P->p >= P->end) return W_BAD;
    if (*P->p == ',') {
        P->p++;
        skip_ws(P);
        return W_NEXT;
    }
    if (*P->p != close) return W_BAD;
    P->p++;
    P->depth--;
    return W_DONE;
}

/* A member's name and its ':' (the name checked, not kept unless asked for). */
static inline int member_name(Parser *P, Str *k) {
    if (P->p >= P->end || *P->p != '"' || !scan_string(P, k)) return 0;
    skip_ws(P);
    if (P->p >= P->end || *P->p != ':') return 0;
    P->p++;
    skip_ws(P);
    return 1;
}

static int skip_value(Parser *P) {
    if (P->p >= P->end) return 0;
    unsigned char c = *P->p;
    if (c == '{' || c == '[') {
        unsigned char close = c == '{' ? '}' : ']';
        int r = enter(P, c, close);
        while (r == W_NEXT) {
            Str k;
            if (c == '{' && !member_name(P, &k)) return 0;
            if (!skip_value(P)) return 0;
            r = next_or_close(P, close);
        }
        return r == W_DONE;
    }
    Val v;
    return scan_value(P, &v);
}

/* Members of an object, starting at its "{": calls on_member for each (key checked). */
typedef int (*MemberFn)(Parser *P, void *ctx, const Str *key);

static int scan_object(Parser *P, MemberFn on_member, void *ctx) {
    int r = enter(P, '{', '}');
    while (r == W_NEXT) {
        Str k;
        if (!member_name(P, &k) || !on_member(P, ctx, &k)) return 0;
        r = next_or_close(P, '}');
    }
    return r == W_DONE;
}

/* The array at P->p, each element through fn (an object reader); 0 on anything else.
 * Always inlined where it is called with a constant fn, so that a hot element reader (an
 * attribute's KeyValue) is called directly, or inlined in turn; scan_array below for the
 * rest. */
typedef int (*ElemFn)(Parser *P, void *ctx);

static inline __attribute__((always_inline)) int scan_array_of(Parser *P, ElemFn fn,
                                                               void *ctx) {
    int r = enter(P, '[', ']');
    while (r == W_NEXT) {
        if (!fn(P, ctx)) return 0;
        r = next_or_close(P, ']');
    }
    return r == W_DONE;
}

static int scan_array(Parser *P, ElemFn fn, void *ctx) { return scan_array_of(P, fn, ctx); }

static int key_is(const Str *k, const char *name, size_t n) {
    return k->n == n && memcmp(k->s, name, n) == 0;
}

/* 1 when the next byte is c. */
static int at(const Parser *P, unsigned char c) { return P->p < P->end && *P->p == c; }

/* 1 the first time a member (its bit) is met, which is recorded; 0 for a duplicate. */
static int first_time(unsigned *seen, unsigned bit) {
    if (*seen & bit) return 0;
    *seen |= bit;
    return 1;
}

/* The value of n decimal digits when all are digits and it is at most max (below 10**19). */
static inline int digits_at_most(const unsigned char *s, size_t n, uint64_t max, uint64_t *out) {
    for (; n > 19; s++, n--)
        if (*s != '0') return 0; /* a digit other than a leading zero: 10**19 or more */
    uint64_t x = 0; /* 19 digits at most: no overflow */
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i])) return 0;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    if (x > max) return 0;
    *out = x;
    return 1;
}

/* ------------------------------------------------------------------ args */

/* The members of args the loader reads, as in _kineto_fast._ARG_KEYS (0-3 and 13 aside,
 * 4-11 are the collective keys whose presence marks a collective row). */
static const char *const ARG_KEYS[] = {
    "correlation", "stream", "device", "External id",
    "Collective name", "Process Group Name", "Process Group ID", "Process Group Ranks",
    "In msg nelems", "Out msg nelems", "pg_name", "collective_name",
    "Seq", "seq", "Group size", "dtype", "labels",
};
#define N_ARG_KEYS (sizeof ARG_KEYS / sizeof ARG_KEYS[0])
static size_t ARG_LENS[N_ARG_KEYS];
#define A_CORR 0
#define A_STREAM 1
#define A_DEVICE 2
#define A_EXT 3
#define A_COLL_FIRST 4
#define A_COLL_LAST 11

typedef struct {
    unsigned seen;
    Val vals[4]; /* correlation, stream, device, External id */
} Args;

static int on_arg(Parser *P, void *ctx, const Str *k) {
    Args *a = (Args *)ctx;
    if (k->esc) return 0; /* an escaped key might spell one we read */
    for (unsigned i = 0; i < N_ARG_KEYS; i++) {
        if (key_is(k, ARG_KEYS[i], ARG_LENS[i])) {
            if (a->seen & (1u << i)) return 0; /* duplicate */
            a->seen |= 1u << i;
            if (i < 4) return scan_value(P, &a->vals[i]);
            return skip_value(P);
        }
    }
    return skip_value(P);
}

/* ------------------------------------------------------------------ events */

enum { F_PH, F_CAT, F_NAME, F_TS, F_DUR, F_PID, F_TID, F_ID, F_ARGS, N_FIELDS };
static const char *const FIELD_KEYS[N_FIELDS] = {"ph", "cat", "name", "ts", "dur",
                                                 "pid", "tid", "id", "args"};
static size_t FIELD_LENS[N_FIELDS];

typedef struct {
    unsigned seen;
    Val f[N_FIELDS];
    int args_obj;
    Args args;
} Event;

static int on_field(Parser *P, void *ctx, const Str *k) {
    Event *e = (Event *)ctx;
    if (k->esc) return 0;
    for (unsigned i = 0; i < N_FIELDS; i++) {
        if (key_is(k, FIELD_KEYS[i], FIELD_LENS[i])) {
            if (e->seen & (1u << i)) return 0;
            e->seen |= 1u << i;
            if (i == F_ARGS && P->p < P->end && *P->p == '{') {
                e->args_obj = 1;
                e->f[i].kind = K_OBJ;
                e->f[i].start = P->p;
                if (!scan_object(P, on_arg, &e->args)) return 0;
                e->f[i].stop = P->p;
                return 1;
            }
            return scan_value(P, &e->f[i]);
        }
    }
    return skip_value(P);
}

typedef struct {
    int64_t limit;
    Dict names, cats;
    Vec name_code, cat_code, start, dur, pid, tid, corr, stream, ext, dev;
    Vec coll;   /* (row, args start, args stop) */
    Vec f_ph, f_pid, f_tid, f_ts, f_id, f_ok;
    Vec labels; /* (event start, event stop) of process_labels metadata events */
    int64_t rows;
} Out;

static const char PHASES[] = "XsfMBEiICbnetPONDRc()TpSF";

static int has(const Event *e, int f) { return (e->seen >> f) & 1u; }

/* An int64 JSON integer (not beyond int64) */
static int plain_int(const Val *v, int64_t *out) {
    if (v->kind != K_NUM || !v->num.is_int || v->num.big) return 0;
    *out = v->num.value;
    return 1;
}

/* As _kineto_fast._int_column: integers within (-2**62, 2**62) as they are, else -1. */
static int64_t int_or_minus1(const Args *a, int present, int idx) {
    int64_t x;
    if (!present || !plain_int(&a->vals[idx], &x)) return -1;
    return (x > -LIM62 && x < LIM62) ? x : -1;
}

static int text_is(Parser *P, const Val *v, const char *s, size_t n) {
    const unsigned char *t;
    size_t len;
    if (v->kind != K_STR || !string_text(P, &v->str, &t, &len)) return 0;
    return len == n && memcmp(t, s, n) == 0;
}

static int handle_event(Parser *P, Out *o, const Event *e, const unsigned char *ev_start) {
    const Val *ph = &e->f[F_PH];
    if (!has(e, F_PH) || ph->kind != K_STR || ph->str.esc || ph->str.n != 1) return 0;
    char c = (char)ph->str.s[0];
    if (!memchr(PHASES, c, sizeof PHASES - 1)) return 0;
    int args_ok = !has(e, F_ARGS) || e->args_obj || e->f[F_ARGS].kind == K_NULL;
    if (c == 'X') {
        if (!args_ok) return 0;
        const unsigned char *cat = (const unsigned char *)"", *name;
        size_t ncat = 0, nname;
        if (has(e, F_CAT)) {
            if (e->f[F_CAT].kind != K_STR || !string_text(P, &e->f[F_CAT].str, &cat, &ncat))
                return 0;
        }
        if (ncat == 5 && memcmp(cat, "Trace", 5) == 0) return 1; /* the profiler's own span */
        int32_t cc = dict_code(&o->cats, cat, ncat);
        if (cc < 0) return 0;
        if (!has(e, F_NAME) || e->f[F_NAME].kind != K_STR ||
            !string_text(P, &e->f[F_NAME].str, &name, &nname))
            return 0;
        int32_t nc = dict_code(&o->names, name, nname);
        if (nc < 0) return 0;
        int64_t ts, dur = 0, pid, tid, dev;
        if (!has(e, F_TS) || e->f[F_TS].kind != K_NUM || !num_to_ns(&e->f[F_TS].num, o->limit, &ts))
            return 0;
        if (has(e, F_DUR) &&
            (e->f[F_DUR].kind != K_NUM || !num_to_ns(&e->f[F_DUR].num, o->limit, &dur) || dur < 0))
            return 0;
        if (!has(e, F_PID) || !plain_int(&e->f[F_PID], &pid)) return 0;
        if (!has(e, F_TID) || !plain_int(&e->f[F_TID], &tid)) return 0;
        const Args *a = &e->args;
        unsigned seen = e->args_obj ? a->seen : 0;
        dev = pid;
        if (seen & (1u << A_DEVICE)) {
            if (!plain_int(&a->vals[A_DEVICE], &dev)) return 0;
        }
        unsigned coll_mask = ((1u << (A_COLL_LAST + 1)) - 1) & ~((1u << A_COLL_FIRST) - 1);
        if (seen & coll_mask) {
            int64_t t[3] = {o->rows, (int64_t)(e->f[F_ARGS].start - P->base),
                            (int64_t)(e->f[F_ARGS].stop - P->base)};
            if (!vec_push(&o->coll, t, sizeof t)) return 0;
        }
        if (!push_i32(&o->name_code, nc) || !push_i32(&o->cat_code, cc) ||
            !push_i64(&o->start, ts) || !push_i64(&o->dur, dur) || !push_i64(&o->pid, pid) ||
            !push_i64(&o->tid, tid) ||
            !push_i64(&o->corr, int_or_minus1(a, (seen >> A_CORR) & 1u, A_CORR)) ||
            !push_i64(&o->stream, int_or_minus1(a, (seen >> A_STREAM) & 1u, A_STREAM)) ||
            !push_i64(&o->ext, int_or_minus1(a, (seen >> A_EXT) & 1u, A_EXT)) ||
            !push_i64(&o->dev, dev))
            return 0;
        o->rows++;
        return 1;
    }
    if (c == 's' || c == 'f') {
        if (!has(e, F_CAT)) return 1;
        const Val *cat = &e->f[F_CAT];
        if (cat->kind == K_ARR || cat->kind == K_OBJ) return 0; /* unhashable in Python */
        if (!(text_is(P, cat, "ac2g", 4) || text_is(P, cat, "async_cpu_to_gpu", 16) ||
              text_is(P, cat, "async_gpu", 9)))
            return 1;
        int64_t pid, tid, ts = 0, id = 0;
        uint8_t ok = 0;
        if (!has(e, F_PID) || !plain_int(&e->f[F_PID], &pid)) return 0;
        if (!has(e, F_TID) || !plain_int(&e->f[F_TID], &tid)) return 0;
        if (has(e, F_TS) && e->f[F_TS].kind != K_NULL) {
            if (e->f[F_TS].kind != K_NUM || !num_to_ns(&e->f[F_TS].num, o->limit, &ts)) return 0;
            ok |= 1;
        }
        if (has(e, F_ID) && e->f[F_ID].kind == K_NUM && e->f[F_ID].num.is_int) {
            if (e->f[F_ID].num.big) return 0;
            id = e->f[F_ID].num.value;
            ok |= 2;
        }
        return push_u8(&o->f_ph, (uint8_t)c) && push_i64(&o->f_pid, pid) &&
               push_i64(&o->f_tid, tid) && push_i64(&o->f_ts, ts) && push_i64(&o->f_id, id) &&
               push_u8(&o->f_ok, ok);
    }
    if (c == 'M') {
        if (!args_ok) return 0;
        if (e->args_obj && has(e, F_NAME) && text_is(P, &e->f[F_NAME], "process_labels", 14)) {
            int64_t t[2] = {(int64_t)(ev_start - P->base), (int64_t)(P->p - P->base)};
            return vec_push(&o->labels, t, sizeof t);
        }
        return 1;
    }
    return 1; /* other phases: nothing read */
}

static int scan_event(Parser *P, Out *o) {
    Event e;
    memset(&e, 0, sizeof e);
    const unsigned char *ev_start = P->p;
    if (!scan_object(P, on_field, &e)) return 0;
    return handle_event(P, o, &e, ev_start);
}

/* The events of buf[start:stop]; *close: the "]" position (final mode). */
static int scan_events(Parser *P, Out *o, int final, Py_ssize_t *close) {
    skip_ws(P);
    if (final) {
        if (P->p < P->end && *P->p == ']') {
            *close = P->p - P->base;
            return 1;
        }
    } else if (P->p >= P->end) {
        return 1;
    }
    for (;;) {
        if (P->p >= P->end || *P->p != '{') return 0;
        if (!scan_event(P, o)) return 0;
        skip_ws(P);
        if (P->p >= P->end) return !final;
        if (*P->p == ',') {
            P->p++;
            skip_ws(P);
            continue;
        }
        if (final && *P->p == ']') {
            *close = P->p - P->base;
            return 1;
        }
        return 0;
    }
}

static void out_free(Out *o) {
    dict_free(&o->names);
    dict_free(&o->cats);
    Vec *vs[] = {&o->name_code, &o->cat_code, &o->start, &o->dur, &o->pid, &o->tid,
                 &o->corr, &o->stream, &o->ext, &o->dev, &o->coll, &o->f_ph,
                 &o->f_pid, &o->f_tid, &o->f_ts, &o->f_id, &o->f_ok, &o->labels};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) vec_free(vs[i]);
}

static PyObject *as_bytes(const Vec *v) {
    return PyBytes_FromStringAndSize(v->data ? v->data : "", (Py_ssize_t)v->len);
}

PyDoc_STRVAR(scan_doc,
"scan(buf, start, stop, final, limit_ns, /)\n--\n\n"
"Columns of the Kineto events in buf[start:stop], or None when the msgspec path must run.\n\n"
"Returns (rows, names, name_codes, cats, cat_codes, start_ns, dur_ns, pid, tid, correlation,\n"
"stream, external_id, device, coll, flow_ph, flow_pid, flow_tid, flow_ts, flow_id, flow_ok,\n"
"labels, close): lists of distinct strings and bytes of native int32/int64/uint8 values.");

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj;
    Py_ssize_t start, stop;
    int final;
    long long limit;
    if (!PyArg_ParseTuple(args, "OnnpL:scan", &obj, &start, &stop, &final, &limit)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (start < 0 || stop < start || stop > view.len || limit <= 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: bad start, stop or limit");
        return NULL;
    }
    Parser P;
    memset(&P, 0, sizeof P);
    P.base = (const unsigned char *)view.buf;
    P.p = P.base + start;
    P.end = P.base + stop;
    Out o;
    memset(&o, 0, sizeof o);
    o.limit = (int64_t)limit;
    Py_ssize_t close = -1;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = scan_events(&P, &o, final, &close);
    Py_END_ALLOW_THREADS
    vec_free(&P.scratch);
    PyBuffer_Release(&view);
    if (!ok) {
        out_free(&o);
        Py_RETURN_NONE;
    }
    PyObject *names = dict_list(&o.names);
    PyObject *cats = names ? dict_list(&o.cats) : NULL;
    PyObject *res = NULL;
    if (cats) {
        res = Py_BuildValue(
            "(LNNNNNNNNNNNNNNNNNNNNn)", (long long)o.rows, names, as_bytes(&o.name_code), cats,
            as_bytes(&o.cat_code), as_bytes(&o.start), as_bytes(&o.dur), as_bytes(&o.pid),
            as_bytes(&o.tid), as_bytes(&o.corr), as_bytes(&o.stream), as_bytes(&o.ext),
            as_bytes(&o.dev), as_bytes(&o.coll), as_bytes(&o.f_ph), as_bytes(&o.f_pid),
            as_bytes(&o.f_tid), as_bytes(&o.f_ts), as_bytes(&o.f_id), as_bytes(&o.f_ok),
            as_bytes(&o.labels), close);
    } else {
        Py_XDECREF(names);
    }
    out_free(&o);
    return res;
}

/* ------------------------------------------------------------------ OTLP-JSON lines */

/*
 * Both OTLP scanners walk a chunk of newline-separated lines, one request object each, with
 * one loop (scan_lines): blank lines are skipped; a line longer than max_line stops the
 * reading (its number is reported); a line the scanner's line reader is not sure of is
 * listed as (number, start, stop) for the typed path, the tables taken back to where they
 * stood before it; the GIL is released while the lines are read.
 */

/* A request: its one list member that is read ("resourceSpans", "resourceMetrics") and the
 * reader of each of its elements, given the scanner's tables. */
typedef struct {
    const char *member;
    size_t member_len;
    ElemFn elem;
} Request;

typedef struct {
    const Request *request;
    void *out;
    unsigned seen;
} RequestCtx;

static int on_request(Parser *P, void *vctx, const Str *k) {
    RequestCtx *c = (RequestCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, c->request->member, c->request->member_len)) {
        if (!first_time(&c->seen, 1u)) return 0;
        return scan_array(P, c->request->elem, c->out);
    }
    return skip_value(P);
}

/* A request object that fills the rest of the line (JSON white space after it allowed). */
static int whole_request(Parser *P, const Request *request, void *out) {
    RequestCtx c = {request, out, 0};
    if (!scan_object(P, on_request, &c)) return 0;
    skip_ws(P);
    return P->p == P->end;
}

/* A scanner's tables (fill vs, then mark_save) and counts of rows and resources as they
 * were before a line, to take a line that fails out again (mark_restore). */
#define MAX_TABLES 12

typedef struct {
    Vec *vs[MAX_TABLES];
    size_t lens[MAX_TABLES];
    int n;
    int64_t *rows, *resources; /* the counts, and their values before the line */
    int64_t rows0, resources0;
} Mark;

static void mark_save(Mark *m, int n, int64_t *rows, int64_t *resources) {
    m->n = n;
    for (int i = 0; i < n; i++) m->lens[i] = m->vs[i]->len;
    m->rows = rows;
    m->resources = resources;
    m->rows0 = *rows;
    m->resources0 = *resources;
}

static void mark_restore(const Mark *m) {
    for (int i = 0; i < m->n; i++) m->vs[i]->len = m->lens[i];
    *m->rows = m->rows0;
    *m->resources = m->resources0;
}

/* Reads the request of line lineno (P over it from its first non-blank byte) into out's
 * tables: 1 when read, 0 -- the tables as they were before the line -- for the typed path.
 * It runs without the GIL. */
typedef int (*LineFn)(Parser *P, void *out, int64_t lineno);

/* What the walk over the lines gives besides the tables. */
typedef struct {
    Vec fallback;        /* int64 (number, start, stop) of each line left to the typed path */
    long long long_line; /* the number of the line longer than max_line, or 0 */
    int64_t last_line;   /* the number of the last line read */
} Lines;

static int blank(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* Every line of obj's buffer, the first numbered first_line, through read_line (the GIL
 * released); 0, with the exception set, when obj is not a buffer or memory runs out. Inline
 * with a constant read_line at each call, so that the compiler may specialise it. */
static inline int scan_lines(PyObject *obj, long long first_line, long long max_line,
                             LineFn read_line, void *out, Lines *L) {
    memset(L, 0, sizeof *L);
    L->last_line = (int64_t)first_line - 1;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return 0;
    int64_t lineno = L->last_line;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *base = (const unsigned char *)view.buf, *end = base + view.len;
    const unsigned char *p = base;
    while (ok && p < end) {
        const unsigned char *nl = (const unsigned char *)memchr(p, '\n', (size_t)(end - p));
        const unsigned char *le = nl ? nl : end;
        lineno++;
        if ((long long)(le - p) > max_line) {
            L->long_line = lineno;
            break;
        }
        const unsigned char *q = p;
        while (q < le && blank(*q)) q++;
        if (q < le) {
            Parser P;
            memset(&P, 0, sizeof P);
            P.base = p;
            P.p = q;
            P.end = le;
            int line_ok = read_line(&P, out, lineno);
            vec_free(&P.scratch);
            if (!line_ok &&
                (!push_i64(&L->fallback, lineno) || !push_i64(&L->fallback, p - base) ||
                 !push_i64(&L->fallback, le - base)))
                ok = 0;
        }
        p = nl ? nl + 1 : end;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    L->last_line = lineno;
    if (!ok) PyErr_NoMemory();
    return ok;
}

/* ------------------------------------------------------------------ OTLP-JSON spans */

/*
 * scan_otlp_lines(buf, keys, first_line, max_line) reads every line of a chunk of an OTLP-JSON
 * traces file (one ExportTraceServiceRequest each) and returns the columns
 * otel_ext.analysis.loaders._otlp_fast needs, handing back -- "take the typed path" -- each
 * line it is not sure to read exactly as that path does: any member of a type the typed
 * decoder (otel_ext.exporters.otlp_format) would reject, ids that are not plain hex (base64
 * ids take the typed path), times that are not integers below 2**62, a missing or
 * non-string span name, an AnyValue of a wanted key that is not one plain string, integer,
 * number or boolean, escaped or duplicate member names among those read, nesting deeper
 * than 64, text after the request. Attributes are returned only for the keys asked for.
 */

#define MAX_OTLP_KEYS 64

typedef struct {
    Dict names, traces, strs;
    Vec name_code, start, end, span_id, parent, trace_code, span_res;
    int64_t spans, resources;
    const unsigned char *keys[MAX_OTLP_KEYS];
    size_t key_lens[MAX_OTLP_KEYS];
    int n_keys;
    /* one slot per span and asked-for key, the last value
     * written wins; a resource's slots fill the span's absent ones at the end of the line */
    Vec d_type, d_val; /* spans x keys: T_* or T_ABSENT; the value's 8 bytes */
    Vec r_type, r_val; /* this line's resources x keys */
    Vec line_of;       /* int64 per span: its line number */
    int64_t res_base;  /* the first resource of this line */
    int64_t lineno;
    int16_t ktab[256];
    uint64_t khash[MAX_OTLP_KEYS];
    /* the last raw text seen of a trace id and of each key's string value, and its code:
     * runs of equal values (a resource's host, a trace's spans) skip the dictionary */
    const unsigned char *last_trace_s;
    size_t last_trace_n;
    int32_t last_trace_code;
    const unsigned char *last_str_s[MAX_OTLP_KEYS];
    size_t last_str_n[MAX_OTLP_KEYS];
    int32_t last_str_code[MAX_OTLP_KEYS];
} OOut;

/* An OOut's tables that grow with the lines (a line that fails is taken out again). */
static int oout_tables(OOut *o, Vec **vs) {
    Vec *t[] = {&o->name_code, &o->start,      &o->end,    &o->span_id,
                &o->parent,    &o->trace_code, &o->span_res, &o->d_type,
                &o->d_val,     &o->line_of,    &o->r_type};
    memcpy(vs, t, sizeof t);
    return (int)(sizeof t / sizeof t[0]);
}

static void oout_free(OOut *o) {
    dict_free(&o->names);
    dict_free(&o->traces);
    dict_free(&o->strs);
    Vec *vs[MAX_TABLES];
    for (int i = 0, n = oout_tables(o, vs); i < n; i++) vec_free(vs[i]);
    vec_free(&o->r_val);
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A span id: "" (0) or 16 plain hex digits. */
static int span_hex(const Str *s, uint64_t *out) {
    if (s->esc) return 0;
    if (s->n == 0) {
        *out = 0;
        return 1;
    }
    if (s->n != 16) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++) {
        int h = hexval(s->s[i]);
        if (h < 0) return 0;
        v = (v << 4) | (uint64_t)h;
    }
    *out = v;
    return 1;
}

/* Nanoseconds as ns_or_none reads them: a JSON integer, or a string of digits, in +-2**62. */
static int ns_value(Parser *P, const Val *v, int64_t *out) {
    (void)P;
    if (v->kind == K_NUM) {
        if (!v->num.is_int || v->num.big) return 0;
        if (v->num.value <= -LIM62 || v->num.value >= LIM62) return 0;
        *out = v->num.value;
        return 1;
    }
    uint64_t x;
    if (v->kind != K_STR || v->str.esc || v->str.n == 0 || v->str.n > 20 ||
        !digits_at_most(v->str.s, v->str.n, (uint64_t)LIM62 - 1, &x))
        return 0;
    *out = (int64_t)x;
    return 1;
}

#define KTAB 256 /* open addressing over the asked-for keys' hashes */

static uint64_t key_hash(const unsigned char *s, size_t n);

static void want_init(OOut *o) {
    for (int j = 0; j < KTAB; j++) o->ktab[j] = -1;
    for (int i = 0; i < o->n_keys; i++) {
        uint64_t h = key_hash(o->keys[i], o->key_lens[i]);
        o->khash[i] = h;
        size_t j = (size_t)h & (KTAB - 1);
        while (o->ktab[j] >= 0) j = (j + 1) & (KTAB - 1);
        o->ktab[j] = (int16_t)i;
    }
}

/* A cheap hash of a member name: its length and its first and last 8 bytes. */
static uint64_t key_hash(const unsigned char *s, size_t n) {
    uint64_t a = 0, b = 0;
    if (n >= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
    } else if (n) {
        memcpy(&a, s, n);
    }
    uint64_t h = (a * 0x9E3779B97F4A7C15ULL) ^ (b * 0xC2B2AE3D27D4EB4FULL) ^ (uint64_t)n;
    return h ^ (h >> 29);
}

static int want_key(OOut *o, const Str *k) {
    if (k->esc) return -2;
    uint64_t h = key_hash(k->s, k->n);
    for (size_t j = (size_t)h & (KTAB - 1); o->ktab[j] >= 0; j = (j + 1) & (KTAB - 1)) {
        int i = o->ktab[j];
        if (o->khash[i] == h && o->key_lens[i] == k->n && memcmp(o->keys[i], k->s, k->n) == 0)
            return i;
    }
    return -1;
}

enum { T_STR = 0, T_INT = 1, T_DBL = 2, T_BOOL = 3, T_NONE = 5, T_ABSENT = 255 };

typedef struct {
    OOut *o;
    int64_t row;   /* span row, or -(resource + 1) */
    int want;      /* -1: any value is fine (not read) */
    int type, n_members;
    int64_t i64;
    double f64;
    int32_t str;
} AVCtx;

static int on_anyvalue(Parser *P, void *vctx, const Str *k) {
    AVCtx *c = (AVCtx *)vctx;
    if (c->want < 0) return skip_value(P);
    if (k->esc) return 0;
    Val v;
    if (key_is(k, "stringValue", 11)) {
        if (!scan_value(P, &v) || v.kind != K_STR) return 0;
        const unsigned char *t;
        size_t n;
        OOut *o = c->o;
        int w = c->want;
        if (!v.str.esc && o->last_str_s[w] && o->last_str_n[w] == v.str.n &&
            memcmp(o->last_str_s[w], v.str.s, v.str.n) == 0) {
            c->str = o->last_str_code[w];
        } else {
            if (!string_text(P, &v.str, &t, &n)) return 0;
            c->str = dict_code(&o->strs, t, n);
            if (c->str >= 0 && !v.str.esc) {
                o->last_str_s[w] = v.str.s;
                o->last_str_n[w] = v.str.n;
                o->last_str_code[w] = c->str;
            }
        }
        if (c->str < 0) return 0;
        c->type = T_STR;
    } else if (key_is(k, "intValue", 8)) {
        if (!scan_value(P, &v)) return 0;
        if (v.kind == K_NUM) {
            if (!v.num.is_int || v.num.big) return 0;
            c->i64 = v.num.value;
        } else if (v.kind == K_STR && !v.str.esc && v.str.n > 0 && v.str.n <= 19) {
            size_t neg = v.str.s[0] == '-';
            uint64_t x;
            if (neg >= v.str.n ||
                !digits_at_most(v.str.s + neg, v.str.n - neg, (uint64_t)INT64_MAX, &x))
                return 0;
            c->i64 = neg ? -(int64_t)x : (int64_t)x;
        } else {
            return 0;
        }
        c->type = T_INT;
    } else if (key_is(k, "doubleValue", 11)) {
        if (!scan_value(P, &v) || v.kind != K_NUM) return 0;
        if (v.num.is_int && !v.num.big) {
            c->f64 = (double)v.num.value;  /* float(int): correctly rounded */
            c->i64 = v.num.value;
            c->type = T_DBL;
            c->n_members++;
            return 1;
        }
        size_t n = (size_t)(v.stop - v.start);
        char tmp[64];
        if (n >= sizeof tmp || v.num.big) return 0;
        memcpy(tmp, v.start, n);
        tmp[n] = 0;
        char *endp;
        c->f64 = strtod(tmp, &endp);
        if (endp != tmp + n) return 0;
        c->type = T_DBL;
    } else if (key_is(k, "boolValue", 9)) {
        if (!scan_value(P, &v) || (v.kind != K_TRUE && v.kind != K_FALSE)) return 0;
        c->i64 = v.kind == K_TRUE;
        c->type = T_BOOL;
    } else if (key_is(k, "arrayValue", 10) || key_is(k, "kvlistValue", 11) ||
               key_is(k, "bytesValue", 10)) {
        return 0; /* the msgspec path reads these */
    } else {
        return skip_value(P); /* not an AnyValue member: ignored, as msgspec does */
    }
    c->n_members++;
    return 1;
}

typedef struct {
    OOut *o;
    int64_t row;
    int seen_key, seen_value, want, parsed;
    const unsigned char *value_at; /* the value's position, read once the key is known */
    int value_depth;
    AVCtx a; /* the value, once read */
} KVCtx;

static void av_init(AVCtx *a, OOut *o, int want) {
    memset(a, 0, sizeof *a);
    a->o = o;
    a->want = want;
    a->type = T_NONE;
}

static int on_kv(Parser *P, void *vctx, const Str *k) {
    KVCtx *c = (KVCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "key", 3)) {
        if (c->seen_key++) return 0;
        Val v;
        if (!scan_value(P, &v) || v.kind != K_STR) return 0;
        c->want = want_key(c->o, &v.str);
        if (c->want == -2) return 0;
        return 1;
    }
    if (key_is(k, "value", 5)) {
        if (c->seen_value++) return 0;
        c->value_at = P->p;
        c->value_depth = P->depth;
        if (at(P, 'n')) return match_lit(P, "null", 4);
        if (!at(P, '{')) return 0;
        if (c->seen_key && c->want >= 0) { /* the usual order: read it now */
            av_init(&c->a, c->o, c->want);
            c->parsed = 1;
            return scan_object(P, on_anyvalue, &c->a) && c->a.n_members <= 1;
        }
        return skip_value(P); /* read after the object, once the key is known */
    }
    return skip_value(P);
}

/* A KeyValue written compactly, {"key":"K","value":{...}} (what our exporter and the
 * Collector write), read without the general member loop: the same checks on the same text
 * (the key and every value member scanned as the general path scans them). 1 when read,
 * 0 -- P unchanged -- for the general path to read it (any other form, or an error). */
static int kv_fast(Parser *P, KVCtx *c) {
    const unsigned char *start = P->p;
    int depth = P->depth;
    if (P->end - P->p < 8 || memcmp(P->p, "{\"key\":\"", 8) != 0 || depth + 1 > MAX_DEPTH)
        return 0;
    P->p += 7;
    Str k;
    int want;
    if (!scan_string(P, &k) || k.esc) goto general;
    if (P->end - P->p < 10 || memcmp(P->p, ",\"value\":{", 10) != 0) goto general;
    P->p += 9;
    P->depth = depth + 1;
    want = want_key(c->o, &k);
    if (want < 0) {
        if (!skip_value(P)) goto general;
    } else {
        av_init(&c->a, c->o, want);
        if (!scan_object(P, on_anyvalue, &c->a) || c->a.n_members > 1) goto general;
        c->parsed = 1;
    }
    if (!at(P, '}')) goto general;
    P->p++;
    P->depth = depth;
    c->want = want;
    c->seen_key = c->seen_value = 1;
    return 1;
general:
    P->p = start;
    P->depth = depth;
    c->parsed = 0;
    return 0;
}

typedef struct {
    OOut *o;
    int64_t row; /* span row, or -(resource + 1) */
} AttrCtx;

/* One KeyValue of an attributes list: a wanted key's value into its slot of the row. */
static int kv_elem(Parser *P, void *vctx) {
    OOut *o = ((AttrCtx *)vctx)->o;
    int64_t row = ((AttrCtx *)vctx)->row;
    KVCtx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.row = row;
    c.want = -1;
    if (!kv_fast(P, &c) && !scan_object(P, on_kv, &c)) return 0;
    if (c.want < 0) return 1;
    if (!c.parsed) {
        av_init(&c.a, o, c.want);
        if (c.seen_value && *c.value_at == '{') {
            const unsigned char *after = P->p;
            int depth = P->depth;
            P->p = c.value_at;
            P->depth = c.value_depth;
            int ok = scan_object(P, on_anyvalue, &c.a);
            P->p = after;
            P->depth = depth;
            if (!ok || c.a.n_members > 1) return 0;
        }
    }
    AVCtx a = c.a;
    int32_t key = c.want;
    uint8_t type = (uint8_t)a.type;
    int64_t v = a.i64;
    if (type == T_DBL) memcpy(&v, &a.f64, 8);
    else if (type == T_STR) v = a.str;
    else if (type == T_NONE) v = 0;
    size_t slot;
    uint8_t *types;
    int64_t *vals;
    if (row >= 0) {
        slot = (size_t)row * (size_t)o->n_keys + (size_t)key;
        types = (uint8_t *)o->d_type.data;
        vals = (int64_t *)o->d_val.data;
    } else {
        slot = (size_t)(-row - 1 - o->res_base) * (size_t)o->n_keys + (size_t)key;
        types = (uint8_t *)o->r_type.data;
        vals = (int64_t *)o->r_val.data;
    }
    types[slot] = type;
    vals[slot] = v;
    return 1;
}

/* An attributes list (null where a list belongs: the typed path) into row's slots. */
static int scan_attributes(Parser *P, OOut *o, int64_t row) {
    AttrCtx c = {o, row};
    return scan_array_of(P, kv_elem, &c);
}

/* An array of objects whose members are not read (events, links): the types msgspec checks. */
static int object_elem(Parser *P, void *ctx) {
    (void)ctx;
    if (!at(P, '{')) return 0;
    return skip_value(P);
}

/* Room for slot row `row` (all absent) of a dense table of n_keys columns. */
static int dense_row(Vec *types, Vec *vals, int64_t row, int n_keys) {
    size_t k = (size_t)n_keys, need = ((size_t)row + 1) * k;
    if (need > types->len) {
        if (!vec_reserve(types, need - types->len) || !vec_reserve(vals, (need - vals->len / 8) * 8))
            return 0;
        types->len = need;
        vals->len = need * 8;
    }
    memset(types->data + (size_t)row * k, T_ABSENT, k);
    memset(vals->data + (size_t)row * k * 8, 0, k * 8);
    return 1;
}

typedef struct {
    OOut *o;
    int64_t res;
    unsigned seen;
    int64_t start, end;
    uint64_t sid, pid;
    int32_t name, trace;
} SpanCtx;

static int on_span(Parser *P, void *vctx, const Str *k) {
    SpanCtx *c = (SpanCtx *)vctx;
    OOut *o = c->o;
    if (k->esc) return 0;
    static const char *const F[] = {"traceId", "spanId", "parentSpanId", "name",
                                    "startTimeUnixNano", "endTimeUnixNano", "attributes",
                                    "kind", "events", "links", "status", "traceState", "flags"};
    static const size_t FL[] = {7, 6, 12, 4, 17, 15, 10, 4, 6, 5, 6, 10, 5};
    /* candidates by length, then one comparison */
    int f = -1;
    switch (k->n) {
        case 4: f = k->s[0] == 'n' ? 3 : 7; break;
        case 5: f = k->s[0] == 'l' ? 9 : 12; break;
        case 6: f = k->s[0] == 's' ? (k->s[1] == 'p' ? 1 : 10) : 8; break;
        case 7: f = 0; break;
        case 10: f = k->s[0] == 'a' ? 6 : 11; break;
        case 12: f = 2; break;
        case 15: f = 5; break;
        case 17: f = 4; break;
        default: break;
    }
    if (f >= 0 && memcmp(k->s, F[f], FL[f]) != 0) f = -1;
    if (f < 0) return skip_value(P);
    if (!first_time(&c->seen, 1u << f)) return 0;
    Val v;
    switch (f) {
        case 0: {
            if (!scan_value(P, &v) || v.kind != K_STR || v.str.esc) return 0;
            if (v.str.n != 0 && v.str.n != 32) return 0;
            if (o->last_trace_s && o->last_trace_n == v.str.n &&
                memcmp(o->last_trace_s, v.str.s, v.str.n) == 0) {
                c->trace = o->last_trace_code;
                return 1;
            }
            unsigned char low[32];
            for (size_t i = 0; i < v.str.n; i++) {
                int h = hexval(v.str.s[i]);
                if (h < 0) return 0;
                low[i] = (unsigned char)"0123456789abcdef"[h];
            }
            c->trace = dict_code(&o->traces, low, v.str.n);
            if (c->trace < 0) return 0;
            o->last_trace_s = v.str.s;
            o->last_trace_n = v.str.n;
            o->last_trace_code = c->trace;
            return c->trace >= 0;
        }
        case 1:
        case 2:
            if (!scan_value(P, &v) || v.kind != K_STR) return 0;
            return span_hex(&v.str, f == 1 ? &c->sid : &c->pid);
        case 3: {
            if (!scan_value(P, &v) || v.kind != K_STR) return 0;
            const unsigned char *t;
            size_t n;
            if (!string_text(P, &v.str, &t, &n)) return 0;
            c->name = dict_code(&o->names, t, n);
            return c->name >= 0;
        }
        case 4:
        case 5:
            if (!scan_value(P, &v)) return 0;
            return ns_value(P, &v, f == 4 ? &c->start : &c->end);
        case 6:
            return scan_attributes(P, o, o->spans);
        case 7:
            if (!scan_value(P, &v)) return 0;
            return (v.kind == K_NUM && v.num.is_int && !v.num.big) || v.kind == K_STR;
        case 8:
        case 9:
            return scan_array(P, object_elem, NULL);
        case 10:
            return at(P, '{') && skip_value(P);
        case 11:
            return scan_value(P, &v) && v.kind == K_STR;
        default: /* flags: int | None */
            if (!scan_value(P, &v)) return 0;
            return v.kind == K_NULL || (v.kind == K_NUM && v.num.is_int && !v.num.big);
    }
}

static int span_elem(Parser *P, void *vctx) {
    OOut *o = (OOut *)((int64_t *)vctx)[0];
    SpanCtx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.trace = -1;
    if (!dense_row(&o->d_type, &o->d_val, o->spans, o->n_keys)) return 0;
    if (!scan_object(P, on_span, &c)) return 0;
    /* name, start and end present; the rest defaults as the typed records do */
    if (!(c.seen & (1u << 3)) || !(c.seen & (1u << 4)) || !(c.seen & (1u << 5))) return 0;
    if (c.trace < 0) {
        c.trace = dict_code(&o->traces, (const unsigned char *)"", 0);
        if (c.trace < 0) return 0;
    }
    if (!push_i32(&o->name_code, c.name) || !push_i64(&o->start, c.start) ||
        !push_i64(&o->end, c.end) || !vec_push(&o->span_id, &c.sid, 8) ||
        !vec_push(&o->parent, &c.pid, 8) || !push_i32(&o->trace_code, c.trace) ||
        !push_i64(&o->span_res, ((int64_t *)vctx)[1]) ||
        !push_i64(&o->line_of, o->lineno))
        return 0;
    o->spans++;
    return 1;
}

typedef struct {
    OOut *o;
    int64_t res;
    unsigned seen;
} GenCtx;

static int on_scope(Parser *P, void *vctx, const Str *k) {
    GenCtx *c = (GenCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "name", 4) || key_is(k, "version", 7)) {
        Val v;
        return scan_value(P, &v) && v.kind == K_STR;
    }
    return skip_value(P);
    (void)c;
}

static int on_scope_spans(Parser *P, void *vctx, const Str *k) {
    GenCtx *c = (GenCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "spans", 5)) {
        if (!first_time(&c->seen, 1u)) return 0;
        int64_t pass[2] = {(int64_t)(intptr_t)c->o, c->res};
        return scan_array(P, span_elem, pass);
    }
    if (key_is(k, "scope", 5)) {
        if (!first_time(&c->seen, 2u)) return 0;
        if (at(P, 'n')) return match_lit(P, "null", 4);
        GenCtx s = *c;
        return scan_object(P, on_scope, &s);
    }
    return skip_value(P);
}

static int scope_spans_elem(Parser *P, void *vctx) {
    GenCtx c = *(GenCtx *)vctx;
    c.seen = 0;
    return scan_object(P, on_scope_spans, &c);
}

static int on_resource(Parser *P, void *vctx, const Str *k) {
    GenCtx *c = (GenCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "attributes", 10)) {
        if (!first_time(&c->seen, 1u)) return 0;
        return scan_attributes(P, c->o, -(c->res + 1));
    }
    return skip_value(P);
}

static int on_resource_spans(Parser *P, void *vctx, const Str *k) {
    GenCtx *c = (GenCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "instrumentationLibrarySpans", 27)) return 0; /* old name: msgspec path */
    if (key_is(k, "scopeSpans", 10)) {
        if (!first_time(&c->seen, 1u)) return 0;
        return scan_array(P, scope_spans_elem, c);
    }
    if (key_is(k, "resource", 8)) {
        if (!first_time(&c->seen, 2u)) return 0;
        if (at(P, 'n')) return match_lit(P, "null", 4);
        GenCtx r = *c;
        r.seen = 0;
        return scan_object(P, on_resource, &r);
    }
    return skip_value(P);
}

static int resource_spans_elem(Parser *P, void *vctx) {
    OOut *o = (OOut *)vctx;
    GenCtx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.res = o->resources;
    if (!dense_row(&o->r_type, &o->r_val, o->resources - o->res_base, o->n_keys))
        return 0;
    if (!scan_object(P, on_resource_spans, &c)) return 0;
    o->resources++;
    return 1;
}

/* A span's absent slots take its resource's values (the span's own win). */
static void merge_resources(OOut *o, int64_t first_span) {
    size_t k = (size_t)o->n_keys;
    const int64_t *res = (const int64_t *)o->span_res.data;
    uint8_t *t = (uint8_t *)o->d_type.data;
    int64_t *v = (int64_t *)o->d_val.data;
    const uint8_t *rt = (const uint8_t *)o->r_type.data;
    const int64_t *rv = (const int64_t *)o->r_val.data;
    for (int64_t s = first_span; s < o->spans; s++) {
        size_t r = (size_t)(res[s] - o->res_base) * k;
        size_t row = (size_t)s * k;
        for (size_t j = 0; j < k; j++)
            if (t[row + j] == T_ABSENT && rt[r + j] != T_ABSENT) {
                t[row + j] = rt[r + j];
                v[row + j] = rv[r + j];
            }
    }
}

static const Request SPANS_REQUEST = {"resourceSpans", 13, resource_spans_elem};

static int span_line(Parser *P, void *out, int64_t lineno) {
    OOut *o = (OOut *)out;
    Mark m;
    mark_save(&m, oout_tables(o, m.vs), &o->spans, &o->resources);
    o->r_type.len = 0;
    o->r_val.len = 0;
    o->res_base = o->resources;
    o->lineno = lineno;
    if (whole_request(P, &SPANS_REQUEST, o)) {
        merge_resources(o, m.rows0);
        return 1;
    }
    mark_restore(&m);
    return 0;
}

PyDoc_STRVAR(scan_otlp_lines_doc,
"scan_otlp_lines(buf, keys, first_line, max_line, /)\n--\n\n"
"Columns of the spans of every line (one OTLP-JSON traces request each) of buf, the first\n"
"numbered first_line; blank lines are skipped. A line the extractor is not sure to read as\n"
"the msgspec path does is left to that path: its (number, start, stop) is listed. Reading\n"
"stops at a line longer than max_line bytes.\n\n"
"Returns (spans, names, name_codes, start_ns, end_ns, span_id, parent_span_id, traces,\n"
"trace_codes, line_of, slot_type, slot_value, strings, fallback, long_line, last_line): names,\n"
"traces "
"and strings are lists of distinct strings, each with '' at code 0; slot_type and\n"
"slot_value are spans x len(keys) (uint8: 0 string, 1 integer, 2 number, 3 boolean,\n"
"5 no value, 255 absent; int64: the integer, the string's code, the double's bits);\n"
"fallback holds int64 triples; long_line is the number of the line too long, or 0; last_line\n"
"the number of the last line read.");

static PyObject *scan_otlp_lines(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj, *keys;
    long long first_line, max_line;
    if (!PyArg_ParseTuple(args, "OO!LL:scan_otlp_lines", &obj, &PyTuple_Type, &keys,
                          &first_line, &max_line))
        return NULL;
    Py_ssize_t nk = PyTuple_GET_SIZE(keys);
    if (nk > MAX_OTLP_KEYS || nk < 1) {
        PyErr_SetString(PyExc_ValueError, "scan_otlp_lines: between 1 and 64 keys");
        return NULL;
    }
    OOut o;
    memset(&o, 0, sizeof o);
    o.n_keys = (int)nk;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *kb = PyTuple_GET_ITEM(keys, i);
        if (!PyBytes_Check(kb)) {
            PyErr_SetString(PyExc_TypeError, "scan_otlp_lines: keys must be bytes");
            return NULL;
        }
        o.keys[i] = (const unsigned char *)PyBytes_AS_STRING(kb);
        o.key_lens[i] = (size_t)PyBytes_GET_SIZE(kb);
    }
    want_init(&o);
    Lines L;
    if (dict_code(&o.names, (const unsigned char *)"", 0) != 0 ||
        dict_code(&o.traces, (const unsigned char *)"", 0) != 0 ||
        dict_code(&o.strs, (const unsigned char *)"", 0) != 0) {
        oout_free(&o);
        return PyErr_NoMemory();
    }
    PyObject *res = NULL;
    if (scan_lines(obj, first_line, max_line, span_line, &o, &L)) {
        PyObject *names = dict_list(&o.names);
        PyObject *traces = names ? dict_list(&o.traces) : NULL;
        PyObject *strs = traces ? dict_list(&o.strs) : NULL;
        if (strs) {
            res = Py_BuildValue(
                "(LNNNNNNNNNNNNNLL)", (long long)o.spans, names, as_bytes(&o.name_code),
                as_bytes(&o.start), as_bytes(&o.end), as_bytes(&o.span_id), as_bytes(&o.parent),
                traces, as_bytes(&o.trace_code), as_bytes(&o.line_of), as_bytes(&o.d_type),
                as_bytes(&o.d_val), strs, as_bytes(&L.fallback), L.long_line,
                (long long)L.last_line);
        } else {
            Py_XDECREF(names);
            Py_XDECREF(traces);
        }
    }
    vec_free(&L.fallback);
    oout_free(&o);
    return res;
}


/* ------------------------------------------------------------------ OTLP-JSON metric points */

/*
 * scan_otlp_metrics_lines(buf, first_line, max_line) reads every line (one
 * ExportMetricsServiceRequest each) and returns per data point its metric name, kind, times,
 * value, count, the raw text of its attributes and its resource; a line it is not sure to
 * read exactly as the typed lean decoder (exporters._otlp_decode.LeanMetricsRequest) and the
 * loader's checks do is handed back: a member of a type that decoder rejects, a time, value,
 * count or sum the loader would report or that is not plain, a metric without a name or with
 * other than one data body, escaped or duplicate member names among those read.
 */

enum { MK_GAUGE = 0, MK_SUM, MK_HIST, MK_EXPHIST, MK_SUMMARY };

typedef struct {
    Dict names, texts;
    Vec name_code, kind, time, start, value, count, attr, res, line, pidx;
    Vec res_attr; /* per resource: the code of its attributes' text */
    int64_t points, resources, lineno;
} MOut;

/* An MOut's tables that grow with the lines (a line that fails is taken out again). */
static int mout_tables(MOut *o, Vec **vs) {
    Vec *t[] = {&o->name_code, &o->kind, &o->time, &o->start, &o->value,   &o->count,
                &o->attr,      &o->res,  &o->line, &o->pidx,  &o->res_attr};
    memcpy(vs, t, sizeof t);
    return (int)(sizeof t / sizeof t[0]);
}

static void mout_free(MOut *o) {
    dict_free(&o->names);
    dict_free(&o->texts);
    Vec *vs[MAX_TABLES];
    for (int i = 0, n = mout_tables(o, vs); i < n; i++) vec_free(vs[i]);
}

/* A JSON number's double, as Python's float() of it; 0 when not finite or too long. */
static int num_double(const Val *v, double *out) {
    if (v->kind != K_NUM) return 0;
    if (v->num.is_int && !v->num.big) {
        *out = (double)v->num.value;
        return 1;
    }
    size_t n = (size_t)(v->stop - v->start);
    char tmp[64];
    if (n >= sizeof tmp) return 0;
    memcpy(tmp, v->start, n);
    tmp[n] = 0;
    char *endp;
    double d = strtod(tmp, &endp);
    if (endp != tmp + n || d > 1.7976931348623157e308 || d < -1.7976931348623157e308) return 0;
    *out = d;
    return 1;
}

/* A plain decimal integer string (optional '-', at most 18 digits) as a double. */
static int str_int_double(const Val *v, double *out) {
    if (v->kind != K_STR || v->str.esc || v->str.n == 0 || v->str.n > 19) return 0;
    size_t neg = v->str.s[0] == '-';
    uint64_t x;
    if (neg >= v->str.n || v->str.n - neg > 18 ||
        !digits_at_most(v->str.s + neg, v->str.n - neg, (uint64_t)INT64_MAX, &x))
        return 0;
    *out = (double)(neg ? -(int64_t)x : (int64_t)x);
    return 1;
}

typedef struct {
    MOut *o;
    int kind;
    int32_t name, pidx;
    int64_t res;
    unsigned seen;
    Val t, st, dbl, in, cnt, sm;
    const unsigned char *attr_s, *attr_e;
} PointCtx;

static int on_point(Parser *P, void *vctx, const Str *k) {
    PointCtx *c = (PointCtx *)vctx;
    if (k->esc) return 0;
    static const char *const F[] = {"timeUnixNano", "startTimeUnixNano", "asDouble", "asInt",
                                    "count", "sum", "attributes"};
    static const size_t FL[] = {12, 17, 8, 5, 5, 3, 10};
    int f = -1;
    for (int i = 0; i < 7; i++)
        if (k->n == FL[i] && memcmp(k->s, F[i], FL[i]) == 0) {
            f = i;
            break;
        }
    if (f < 0) return skip_value(P);
    if (!first_time(&c->seen, 1u << f)) return 0;
    if (f == 6) {
        c->attr_s = P->p;
        if (!skip_value(P)) return 0;
        c->attr_e = P->p;
        return 1;
    }
    Val *v = f == 0 ? &c->t : f == 1 ? &c->st : f == 2 ? &c->dbl : f == 3 ? &c->in
           : f == 4 ? &c->cnt : &c->sm;
    if (!scan_value(P, v)) return 0;
    /* the lean decoder's types: int|str|None (times, asInt, count), float|str|None */
    int is_float_field = f == 2 || f == 5;
    if (v->kind == K_NULL || v->kind == K_STR) return 1;
    if (v->kind != K_NUM) return 0;
    if (!is_float_field && (!v->num.is_int || v->num.big)) return 0;
    return 1;
}

static int point_elem(Parser *P, void *vctx) {
    PointCtx c = *(PointCtx *)vctx;
    MOut *o = c.o;
    c.seen = 0;
    c.attr_s = c.attr_e = NULL;
    c.t.kind = c.st.kind = c.dbl.kind = c.in.kind = c.cnt.kind = c.sm.kind = K_NULL;
    if (!at(P, '{')) return 0;
    if (!scan_object(P, on_point, &c)) return 0;
    ((PointCtx *)vctx)->pidx++;
    int64_t t, st = 0, count = -1;
    double value;
    if (c.t.kind == K_NULL || !ns_value(P, &c.t, &t)) return 0;
    if (c.st.kind != K_NULL && !ns_value(P, &c.st, &st)) return 0;
    if (c.kind >= MK_HIST) {
        if (c.cnt.kind == K_NULL) {
            count = 0;
        } else if (c.cnt.kind == K_NUM) {
            if (c.cnt.num.value < 0 || c.cnt.num.value >= LIM62) return 0;
            count = c.cnt.num.value;
        } else {
            uint64_t x;
            if (c.cnt.str.esc || c.cnt.str.n == 0 || c.cnt.str.n > 19 ||
                !digits_at_most(c.cnt.str.s, c.cnt.str.n, (uint64_t)LIM62 - 1, &x))
                return 0;
            count = (int64_t)x;
        }
        if (c.sm.kind == K_NULL) value = NAN;
        else if (!num_double(&c.sm, &value)) return 0;
    } else if (c.dbl.kind != K_NULL) {
        if (!num_double(&c.dbl, &value)) return 0;
    } else if (c.in.kind == K_NUM) {
        value = (double)c.in.num.value;
    } else if (!str_int_double(&c.in, &value)) {
        return 0;
    }
    int32_t attr = c.attr_s ? dict_code(&o->texts, c.attr_s, (size_t)(c.attr_e - c.attr_s))
                            : dict_code(&o->texts, (const unsigned char *)"[]", 2);
    uint8_t kind = (uint8_t)c.kind;
    if (attr < 0 || !push_i32(&o->name_code, c.name) || !push_u8(&o->kind, kind) ||
        !push_i64(&o->time, t) || !push_i64(&o->start, st) ||
        !vec_push(&o->value, &value, 8) || !push_i64(&o->count, count) ||
        !push_i32(&o->attr, attr) || !push_i64(&o->res, c.res) ||
        !push_i64(&o->line, o->lineno) || !push_i32(&o->pidx, c.pidx - 1))
        return 0;
    o->points++;
    return 1;
}

static int on_body(Parser *P, void *vctx, const Str *k) {
    PointCtx *c = (PointCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "dataPoints", 10)) {
        if (!first_time(&c->seen, 1u)) return 0;
        c->pidx = 0;
        return scan_array(P, point_elem, c);
    }
    return skip_value(P);
}

typedef struct {
    MOut *o;
    int64_t res;
    unsigned seen;
    int bodies;
    int32_t name;
    const unsigned char *body_at[5];
    int body_depth[5];
} MetricCtx;

static int on_metric(Parser *P, void *vctx, const Str *k) {
    MetricCtx *c = (MetricCtx *)vctx;
    if (k->esc) return 0;
    static const char *const B[] = {"gauge", "sum", "histogram", "exponentialHistogram",
                                    "summary"};
    static const size_t BL[] = {5, 3, 9, 20, 7};
    if (key_is(k, "name", 4)) {
        if (!first_time(&c->seen, 1u)) return 0;
        Val v;
        if (!scan_value(P, &v) || v.kind != K_STR) return 0;
        const unsigned char *t;
        size_t n;
        if (!string_text(P, &v.str, &t, &n) || n == 0) return 0;
        c->name = dict_code(&c->o->names, t, n);
        return c->name >= 0;
    }
    for (int b = 0; b < 5; b++)
        if (k->n == BL[b] && memcmp(k->s, B[b], BL[b]) == 0) {
            if (!first_time(&c->seen, 2u << b)) return 0;
            if (at(P, 'n')) return match_lit(P, "null", 4);
            if (!at(P, '{')) return 0;
            c->bodies++;
            c->body_at[b] = P->p; /* read once the name is known */
            c->body_depth[b] = P->depth;
            return skip_value(P);
        }
    return skip_value(P);
}

static int metric_elem(Parser *P, void *vctx) {
    MetricCtx c = *(MetricCtx *)vctx;
    c.seen = 0;
    c.bodies = 0;
    c.name = -1;
    memset(c.body_at, 0, sizeof c.body_at);
    if (!at(P, '{')) return 0;
    if (!scan_object(P, on_metric, &c)) return 0;
    if (c.name < 0 || c.bodies != 1) return 0; /* the loader reports these: its path */
    for (int b = 0; b < 5; b++) {
        if (!c.body_at[b]) continue;
        Parser Q = *P;
        Q.p = c.body_at[b];
        Q.depth = c.body_depth[b];
        PointCtx pc;
        memset(&pc, 0, sizeof pc);
        pc.o = c.o;
        pc.kind = b;
        pc.name = c.name;
        pc.res = c.res;
        int ok = scan_object(&Q, on_body, &pc);
        P->scratch = Q.scratch;
        if (!ok) return 0;
    }
    return 1;
}

static int on_scope_metrics(Parser *P, void *vctx, const Str *k) {
    MetricCtx *c = (MetricCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "metrics", 7)) {
        if (!first_time(&c->seen, 1u)) return 0;
        return scan_array(P, metric_elem, c);
    }
    return skip_value(P);
}

static int scope_metrics_elem(Parser *P, void *vctx) {
    MetricCtx c = *(MetricCtx *)vctx;
    c.seen = 0;
    if (!at(P, '{')) return 0;
    return scan_object(P, on_scope_metrics, &c);
}

/* A KeyValue as the typed decoder demands: "key" a string, "value" an object or null. */
static int on_typed_kv(Parser *P, void *vctx, const Str *k) {
    unsigned *seen = (unsigned *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "key", 3)) {
        if (!first_time(seen, 1u)) return 0;
        Val v;
        return scan_value(P, &v) && v.kind == K_STR;
    }
    if (key_is(k, "value", 5)) {
        if (!first_time(seen, 2u)) return 0;
        if (at(P, 'n')) return match_lit(P, "null", 4);
        return at(P, '{') && skip_value(P);
    }
    return skip_value(P);
}

static int typed_kv_elem(Parser *P, void *vctx) {
    (void)vctx;
    unsigned seen = 0;
    if (!at(P, '{')) return 0;
    return scan_object(P, on_typed_kv, &seen);
}

typedef struct {
    MOut *o;
    unsigned seen;
    int32_t attr;
} MResCtx;

static int on_mresource(Parser *P, void *vctx, const Str *k) {
    MResCtx *c = (MResCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "attributes", 10)) {
        if (!first_time(&c->seen, 1u)) return 0;
        const unsigned char *s0 = P->p;
        if (!scan_array(P, typed_kv_elem, NULL)) return 0;
        c->attr = dict_code(&c->o->texts, s0, (size_t)(P->p - s0));
        return c->attr >= 0;
    }
    return skip_value(P);
}

typedef struct {
    MOut *o;
    int64_t res;
    unsigned seen;
    int32_t res_attr;
} RMCtx;

static int on_resource_metrics(Parser *P, void *vctx, const Str *k) {
    RMCtx *c = (RMCtx *)vctx;
    if (k->esc) return 0;
    if (key_is(k, "scopeMetrics", 12)) {
        if (!first_time(&c->seen, 1u)) return 0;
        MetricCtx m;
        memset(&m, 0, sizeof m);
        m.o = c->o;
        m.res = c->res;
        return scan_array(P, scope_metrics_elem, &m);
    }
    if (key_is(k, "resource", 8)) {
        if (!first_time(&c->seen, 2u)) return 0;
        if (at(P, 'n')) return match_lit(P, "null", 4);
        MResCtx r;
        memset(&r, 0, sizeof r);
        r.o = c->o;
        r.attr = c->res_attr;
        if (!at(P, '{') || !scan_object(P, on_mresource, &r)) return 0;
        c->res_attr = r.attr;
        return 1;
    }
    return skip_value(P);
}

static int resource_metrics_elem(Parser *P, void *vctx) {
    MOut *o = (MOut *)vctx;
    RMCtx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.res = o->resources;
    c.res_attr = dict_code(&o->texts, (const unsigned char *)"[]", 2);
    if (c.res_attr < 0 || !at(P, '{')) return 0;
    if (!scan_object(P, on_resource_metrics, &c)) return 0;
    if (!push_i32(&o->res_attr, c.res_attr)) return 0;
    o->resources++;
    return 1;
}

static const Request METRICS_REQUEST = {"resourceMetrics", 15, resource_metrics_elem};

static int metric_line(Parser *P, void *out, int64_t lineno) {
    MOut *o = (MOut *)out;
    Mark m;
    mark_save(&m, mout_tables(o, m.vs), &o->points, &o->resources);
    o->lineno = lineno;
    if (whole_request(P, &METRICS_REQUEST, o)) return 1;
    mark_restore(&m);
    return 0;
}

PyDoc_STRVAR(scan_otlp_metrics_lines_doc,
"scan_otlp_metrics_lines(buf, first_line, max_line, /)\n--\n\n"
"The data points of every line (one OTLP-JSON metrics request each) of buf, the first\n"
"numbered first_line; blank lines skipped; a line the extractor is not sure of is listed.\n\n"
"Returns (points, names, name_codes, kinds, time_ns, start_ns, values, counts, attr_codes,\n"
"resource_of, line_of, point_index, texts, resource_attr_codes, fallback, long_line,\n"
"last_line): kinds uint8 (0 gauge, 1 sum, 2 histogram, 3 exponentialHistogram, 4 summary);\n"
"texts: the distinct raw JSON texts of attribute lists (bytes), resource_attr_codes one\n"
"per resource; fallback int64 (line, start, stop) triples.");

static PyObject *scan_otlp_metrics_lines(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj;
    long long first_line, max_line;
    if (!PyArg_ParseTuple(args, "OLL:scan_otlp_metrics_lines", &obj, &first_line, &max_line))
        return NULL;
    MOut o;
    memset(&o, 0, sizeof o);
    if (dict_code(&o.names, (const unsigned char *)"", 0) != 0) {
        mout_free(&o);
        return PyErr_NoMemory();
    }
    Lines L;
    PyObject *res = NULL;
    if (scan_lines(obj, first_line, max_line, metric_line, &o, &L)) {
        PyObject *names = dict_list(&o.names);
        PyObject *texts = names ? PyList_New((Py_ssize_t)o.texts.count) : NULL;
        if (texts) {
            for (size_t i = 0; i < o.texts.count; i++) {
                const size_t *ent = (const size_t *)o.texts.entries.data + 2 * i;
                PyObject *b = PyBytes_FromStringAndSize(o.texts.arena.data + ent[0],
                                                        (Py_ssize_t)ent[1]);
                if (!b) {
                    Py_CLEAR(texts);
                    break;
                }
                PyList_SET_ITEM(texts, (Py_ssize_t)i, b);
            }
        }
        if (texts) {
            res = Py_BuildValue(
                "(LNNNNNNNNNNNNNNLL)", (long long)o.points, names, as_bytes(&o.name_code),
                as_bytes(&o.kind), as_bytes(&o.time), as_bytes(&o.start), as_bytes(&o.value),
                as_bytes(&o.count), as_bytes(&o.attr), as_bytes(&o.res), as_bytes(&o.line),
                as_bytes(&o.pidx), texts, as_bytes(&o.res_attr),
                as_bytes(&L.fallback), L.long_line, (long long)L.last_line);
        } else {
            Py_XDECREF(names);
        }
    }
    vec_free(&L.fallback);
    mout_free(&o);
    return res;
}


static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"scan_otlp_lines", scan_otlp_lines, METH_VARARGS, scan_otlp_lines_doc},
    {"scan_otlp_metrics_lines", scan_otlp_metrics_lines, METH_VARARGS,
     scan_otlp_metrics_lines_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_ext.analysis.loaders._cscan",
    "Compiled column extractors for Kineto trace events (scan) and OTLP-JSON spans and metric\n"
    "points (scan_otlp_lines, scan_otlp_metrics_lines).",
    -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cscan(void) {
    init_tables();
    for (size_t i = 0; i < N_ARG_KEYS; i++) ARG_LENS[i] = strlen(ARG_KEYS[i]);
    for (size_t i = 0; i < N_FIELDS; i++) FIELD_LENS[i] = strlen(FIELD_KEYS[i]);
    return PyModule_Create(&module);
}
