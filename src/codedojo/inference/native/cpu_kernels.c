/* fp32 CPU kernels of the local engine (codedojo.inference.native builds and loads them): decode attention
(first) and the one-row linear layers of batch-1 decode (at the end).

Decode attention. Each decoding row has one new token whose query heads attend to that row's cached keys and values:
positions 0..length-1 of its row in the layer's K and V tensors, laid out [rows, kv_heads, capacity, dim].
The query heads that share a key head (`groups` of them) are computed together, so every cached key and
value is read from memory once per step, not once per query head, and each row reads only its own length
(a batched SDPA call over rows of different lengths reads the longest row's length for every row).

The work is split into pieces of at most CHUNK positions of one (row, key head), spread over OpenMP threads;
each piece keeps a running maximum, the sum of exponentials below it and the weighted sum of values, and
the pieces of a (row, key head) are merged at the end (the usual split-softmax identity). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#ifndef CHUNK
#define CHUNK 256
#endif
#ifndef BLOCK
#define BLOCK 64
#endif
#define MAX_GROUPS 16
#define MAX_DIM 256

/* e^x for x <= 0 (scores minus their maximum), vectorisable: x = n ln2 + r with |r| <= ln2 / 2, e^r by its
   Taylor series to r^7 / 7! (relative error below 3e-8 there), 2^n put together in the exponent bits. */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = floorf(x * 1.4426950408889634f + 0.5f);
    float r = x - n * 0.693145751953125f - n * 1.4286068203094172e-06f; /* ln2 in two parts */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* scores[t] = q . keys[t] * scale for t < n. */
static inline void dot_rows_plain(const float *q, const float *keys, int64_t n, int dim, float scale,
                                  float *scores) {
    for (int64_t t = 0; t < n; t++) {
        float total = 0.0f;
        for (int e = 0; e < dim; e++) total += q[e] * keys[t * dim + e];
        scores[t] = total * scale;
    }
}

/* acc[e] = keep * acc[e] + sum over t < n of weights[t] * values[t][e]. */
static inline void weigh_rows_plain(const float *weights, const float *values, int64_t n, int dim, float keep,
                                    float *acc) {
    for (int e = 0; e < dim; e++) acc[e] *= keep;
    for (int64_t t = 0; t < n; t++)
        for (int e = 0; e < dim; e++) acc[e] += weights[t] * values[t * dim + e];
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_VECTOR 1

/* The eight sums of a0..a7's lanes, as one vector (lane i: the sum of a_i). */
static inline __m256 sum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
                          __m256 a7) {
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* exp_nonpositive on eight lanes at once, the same steps (and so the same values) as the scalar one. */
static inline __m256 exp8_nonpositive(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.4426950408889634f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.4286068203094172e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

/* scores[t] = exp(scores[t] - m) for t < n, and their sum; m the scores' maximum (so every argument is <= 0). */
static inline float exp_block_vector(float *scores, int64_t n, float m) {
    __m256 mv = _mm256_set1_ps(m), total = _mm256_setzero_ps();
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
        __m256 p = exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + t), mv));
        _mm256_storeu_ps(scores + t, p);
        total = _mm256_add_ps(total, p);
    }
    float lanes[8], sum = 0.0f;
    _mm256_storeu_ps(lanes, total);
    for (int i = 0; i < 8; i++) sum += lanes[i];
    for (; t < n; t++) {
        scores[t] = exp_nonpositive(scores[t] - m);
        sum += scores[t];
    }
    return sum;
}

/* The largest of scores[0..n-1] and m. */
static inline float max_block_vector(const float *scores, int64_t n, float m) {
    __m256 best = _mm256_set1_ps(m);
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) best = _mm256_max_ps(best, _mm256_loadu_ps(scores + t));
    float lanes[8];
    _mm256_storeu_ps(lanes, best);
    for (int i = 0; i < 8; i++) m = lanes[i] > m ? lanes[i] : m;
    for (; t < n; t++) m = scores[t] > m ? scores[t] : m;
    return m;
}

/* dot_rows_plain, eight positions at a time (dim a multiple of 8). */
static inline __attribute__((always_inline)) void dot_rows_vector(const float *q, const float *keys, int64_t n,
                                                                  int dim, float scale, float *scores) {
    int64_t t = 0;
    __m256 s = _mm256_set1_ps(scale);
    for (; t + 8 <= n; t += 8) {
        const float *k = keys + t * dim;
        __m256 a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
        for (int e = 0; e < dim; e += 8) {
            __m256 qe = _mm256_loadu_ps(q + e);
            for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(qe, _mm256_loadu_ps(k + i * dim + e), a[i]);
        }
        _mm256_storeu_ps(scores + t, _mm256_mul_ps(sum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]), s));
    }
    dot_rows_plain(q, keys + t * dim, n - t, dim, scale, scores + t);
}

/* weigh_rows_plain with the sums in registers (dim a multiple of 8, at most MAX_DIM). */
static inline __attribute__((always_inline)) void weigh_rows_vector(const float *weights, const float *values,
                                                                    int64_t n, int dim, float keep, float *acc) {
    __m256 a[MAX_DIM / 8];
    __m256 k = _mm256_set1_ps(keep);
    for (int e = 0; e < dim / 8; e++) a[e] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * e), k);
    for (int64_t t = 0; t < n; t++) {
        __m256 w = _mm256_set1_ps(weights[t]);
        const float *v = values + t * dim;
        for (int e = 0; e < dim / 8; e++) a[e] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * e), a[e]);
    }
    for (int e = 0; e < dim / 8; e++) _mm256_storeu_ps(acc + 8 * e, a[e]);
}

/* dot_rows_vector for the `groups` (2 or 3) query heads of one key head at once, four positions at a time, so each
   key is loaded once for all of them: scores[j * BLOCK + t] = q_j . keys[t] * scale for j < groups, t < n. */
static inline __attribute__((always_inline)) void dot_groups_vector(const float *q, const float *keys, int64_t n,
                                                                    int dim, int groups, float scale,
                                                                    float *scores) {
    int64_t t = 0;
    __m256 s = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
    for (; t + 4 <= n; t += 4) {
        const float *k = keys + t * dim;
        __m256 a[3][4];
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 4; i++) a[j][i] = zero;
        for (int e = 0; e < dim; e += 8) {
            __m256 k0 = _mm256_loadu_ps(k + e), k1 = _mm256_loadu_ps(k + dim + e);
            __m256 k2 = _mm256_loadu_ps(k + 2 * dim + e), k3 = _mm256_loadu_ps(k + 3 * dim + e);
            for (int j = 0; j < groups; j++) {
                __m256 qe = _mm256_loadu_ps(q + j * dim + e);
                a[j][0] = _mm256_fmadd_ps(qe, k0, a[j][0]);
                a[j][1] = _mm256_fmadd_ps(qe, k1, a[j][1]);
                a[j][2] = _mm256_fmadd_ps(qe, k2, a[j][2]);
                a[j][3] = _mm256_fmadd_ps(qe, k3, a[j][3]);
            }
        }
        float lanes[8];
        _mm256_storeu_ps(lanes, _mm256_mul_ps(sum8(a[0][0], a[0][1], a[0][2], a[0][3], a[1][0], a[1][1], a[1][2],
                                                   a[1][3]), s));
        for (int i = 0; i < 4; i++) {
            scores[t + i] = lanes[i];
            scores[BLOCK + t + i] = lanes[4 + i];
        }
        if (groups > 2) {
            _mm256_storeu_ps(lanes, _mm256_mul_ps(sum8(a[2][0], a[2][1], a[2][2], a[2][3], zero, zero, zero, zero), s));
            for (int i = 0; i < 4; i++) scores[2 * BLOCK + t + i] = lanes[i];
        }
    }
    for (int j = 0; j < groups; j++)
        dot_rows_plain(q + j * dim, keys + t * dim, n - t, dim, scale, scores + j * BLOCK + t);
}
#else
#define HAVE_VECTOR 0
#define dot_rows_vector dot_rows_plain
#define weigh_rows_vector weigh_rows_plain
#endif

/* One piece: positions [start, stop) of one row's key head against its `groups` query heads.
   Writes, per query head, the maximum score, the sum of exp(score - maximum) and the weighted value sum.
   The positions go in blocks of BLOCK, every query head through a block before the next block, so a block's
   keys and values come from memory once and stay in the core's first-level cache for the other heads; the
   sums are kept relative to the running maximum and rescaled when it grows. */
static inline __attribute__((always_inline)) void piece_dim(const float *q, const float *keys,
                                                            const float *values, int64_t n, int groups,
                                                            int dim, int vector, float scale, float *out_max,
                                                            float *out_sum, float *out_acc) {
    /* with 2 or 3 query heads per key head, a block's scores of every head come out of one pass over its keys */
    int together = HAVE_VECTOR && vector && (groups == 2 || groups == 3);
    float all[3 * BLOCK];
    for (int j = 0; j < groups; j++) {
        out_max[j] = -INFINITY;
        out_sum[j] = 0.0f;
        for (int e = 0; e < dim; e++) out_acc[(int64_t)j * dim + e] = 0.0f;
    }
    for (int64_t b = 0; b < n; b += BLOCK) {
        int64_t size = n - b < BLOCK ? n - b : BLOCK;
#if HAVE_VECTOR
        if (together) dot_groups_vector(q, keys + b * dim, size, dim, groups, scale, all);
#endif
        for (int j = 0; j < groups; j++) {
            float *scores = all + (together ? j * BLOCK : 0);
            if (!together && vector)
                dot_rows_vector(q + (int64_t)j * dim, keys + b * dim, size, dim, scale, scores);
            else if (!together)
                dot_rows_plain(q + (int64_t)j * dim, keys + b * dim, size, dim, scale, scores);
            float m, total = 0.0f;
#if HAVE_VECTOR
            m = max_block_vector(scores, size, out_max[j]);
            total = exp_block_vector(scores, size, m);
#else
            m = out_max[j];
            for (int64_t t = 0; t < size; t++) m = scores[t] > m ? scores[t] : m;
            for (int64_t t = 0; t < size; t++) {
                scores[t] = exp_nonpositive(scores[t] - m);
                total += scores[t];
            }
#endif
            float keep = out_max[j] == -INFINITY ? 0.0f : exp_nonpositive(out_max[j] - m);
            out_max[j] = m;
            out_sum[j] = out_sum[j] * keep + total;
            if (vector)
                weigh_rows_vector(scores, values + b * dim, size, dim, keep, out_acc + (int64_t)j * dim);
            else
                weigh_rows_plain(scores, values + b * dim, size, dim, keep, out_acc + (int64_t)j * dim);
        }
    }
}

static void piece(const float *q, const float *keys, const float *values, int64_t start, int64_t stop,
                  int groups, int dim, float scale, float *out_max, float *out_sum, float *out_acc) {
    keys += start * dim;
    values += start * dim;
    int64_t n = stop - start;
    /* the common head sizes as constants, so their loops unroll into registers */
    if (dim == 64)
        piece_dim(q, keys, values, n, groups, 64, HAVE_VECTOR, scale, out_max, out_sum, out_acc);
    else if (dim == 128)
        piece_dim(q, keys, values, n, groups, 128, HAVE_VECTOR, scale, out_max, out_sum, out_acc);
    else if (dim % 8 == 0)
        piece_dim(q, keys, values, n, groups, dim, HAVE_VECTOR, scale, out_max, out_sum, out_acc);
    else
        piece_dim(q, keys, values, n, groups, dim, 0, scale, out_max, out_sum, out_acc);
}

/* q: [num, kv_heads, groups, dim] contiguous, one token per decoding row. meta: [num, 2] int32, each row's
   index in the cache and its length (positions to attend to, the new token's included; at least 1).
   key_cache / value_cache: the layer's [cache_rows, kv_heads, capacity, dim], contiguous.
   out: [num, kv_heads, groups, dim]. Returns 0; -1 when a size is beyond this kernel's limits or memory
   runs out; -2 when a row or length in meta lies outside the cache (nothing is read then). */
int codedojo_decode_attention(const float *q, const float *key_cache, const float *value_cache,
                              const int32_t *meta, int num, int kv_heads, int groups, int dim,
                              int64_t cache_rows, int64_t capacity, float scale, float *out, int threads) {
    if (groups < 1 || groups > MAX_GROUPS || dim < 1 || dim > MAX_DIM || kv_heads < 1 || num < 0) return -1;
    for (int i = 0; i < num; i++)
        if (meta[2 * i] < 0 || meta[2 * i] >= cache_rows || meta[2 * i + 1] < 1 || meta[2 * i + 1] > capacity)
            return -2;
    if (num == 0) return 0;
    int64_t pairs = (int64_t)num * kv_heads;
    int64_t *first = malloc(sizeof(int64_t) * (pairs + 1)); /* pair p's pieces are first[p]..first[p+1]-1 */
    if (!first) return -1;
    first[0] = 0;
    for (int64_t p = 0; p < pairs; p++) {
        int64_t length = meta[2 * (p / kv_heads) + 1];
        first[p + 1] = first[p] + (length + CHUNK - 1) / CHUNK;
    }
    int64_t pieces = first[pairs];
    int64_t stride = (int64_t)groups * (dim + 2); /* per piece: max and sum per group, then the sums */
    float *partial = malloc(sizeof(float) * pieces * stride);
    int64_t *owner = malloc(sizeof(int64_t) * pieces);
    if (!partial || !owner) {
        free(first);
        free(partial);
        free(owner);
        return -1;
    }
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t i = first[p]; i < first[p + 1]; i++) owner[i] = p;
    int64_t head_stride = capacity * dim, row_stride = (int64_t)kv_heads * head_stride;

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < pieces; i++) {
        int64_t p = owner[i];
        int64_t row = meta[2 * (p / kv_heads)], length = meta[2 * (p / kv_heads) + 1], head = p % kv_heads;
        int64_t start = (i - first[p]) * CHUNK, stop = start + CHUNK < length ? start + CHUNK : length;
        const float *keys = key_cache + row * row_stride + head * head_stride;
        const float *values = value_cache + row * row_stride + head * head_stride;
        float *mine = partial + i * stride;
        piece(q + p * groups * dim, keys, values, start, stop, groups, dim, scale, mine, mine + groups,
              mine + 2 * groups);
    }

#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t p = 0; p < pairs; p++) {
        for (int j = 0; j < groups; j++) {
            float m = -INFINITY;
            for (int64_t i = first[p]; i < first[p + 1]; i++) {
                float mi = partial[i * stride + j];
                m = mi > m ? mi : m;
            }
            float total = 0.0f;
            float *o = out + (p * groups + j) * dim;
            for (int e = 0; e < dim; e++) o[e] = 0.0f;
            for (int64_t i = first[p]; i < first[p + 1]; i++) {
                const float *mine = partial + i * stride;
                float w = expf(mine[j] - m);
                total += w * mine[groups + j];
                const float *acc = mine + 2 * groups + (int64_t)j * dim;
                for (int e = 0; e < dim; e++) o[e] += w * acc[e];
            }
            float inv = 1.0f / total;
            for (int e = 0; e < dim; e++) o[e] *= inv;
        }
    }
    free(first);
    free(partial);
    free(owner);
    return 0;
}

/* ---- One-row linear layers (batch-1 decode) -------------------------------------------------------------

A decode step of one token multiplies one row by every matrix of the model: each weight is read once and
used for one multiply-add, so the step is a stream of the weights through memory. These read each matrix
row by row in HF's layout ([out, in], contiguous), the rows split into one contiguous range per thread (one
sequential stream each), four rows at a time against the input row, which stays in the first-level cache. */

/* Weight e of a matrix held in fp32 or, with bf16 set, in bf16 (the top half of an fp32: widened exactly). */
static inline float weight_at(const void *w, int64_t e, int bf16) {
    if (!bf16) return ((const float *)w)[e];
    uint32_t bits = (uint32_t)((const uint16_t *)w)[e] << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

#if HAVE_VECTOR
static inline __m256 weights8(const void *w, int64_t e, int bf16) {
    if (!bf16) return _mm256_loadu_ps((const float *)w + e);
    __m128i half = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + e));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
#endif

/* out[i] = w[i] . x for i in [first, last), four rows at a time; w fp32 or bf16 (`bf16`), x and out fp32. */
static inline __attribute__((always_inline)) void rows_dot(const float *x, const void *w, int64_t first,
                                                           int64_t last, int n_in, float *out, int bf16) {
    int64_t i = first;
#if HAVE_VECTOR
    if (n_in % 8 == 0) {
        for (; i + 4 <= last; i += 4) {
            int64_t r0 = i * n_in, r1 = r0 + n_in, r2 = r1 + n_in, r3 = r2 + n_in;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
                   a3 = _mm256_setzero_ps();
            for (int e = 0; e < n_in; e += 8) {
                __m256 xe = _mm256_loadu_ps(x + e);
                a0 = _mm256_fmadd_ps(xe, weights8(w, r0 + e, bf16), a0);
                a1 = _mm256_fmadd_ps(xe, weights8(w, r1 + e, bf16), a1);
                a2 = _mm256_fmadd_ps(xe, weights8(w, r2 + e, bf16), a2);
                a3 = _mm256_fmadd_ps(xe, weights8(w, r3 + e, bf16), a3);
            }
            __m256 zero = _mm256_setzero_ps();
            __m256 sums = sum8(a0, a1, a2, a3, zero, zero, zero, zero);
            float lanes[8];
            _mm256_storeu_ps(lanes, sums);
            out[i] = lanes[0];
            out[i + 1] = lanes[1];
            out[i + 2] = lanes[2];
            out[i + 3] = lanes[3];
        }
    }
#endif
    for (; i < last; i++) {
        float total = 0.0f;
        for (int e = 0; e < n_in; e++) total += weight_at(w, i * n_in + e, bf16) * x[e];
        out[i] = total;
    }
}

/* The range of rows thread `t` of `threads` takes out of n, in multiples of 4. */
static inline void thread_rows(int64_t n, int t, int threads, int64_t *first, int64_t *last) {
    int64_t quads = (n + 3) / 4;
    int64_t a = quads * t / threads * 4, b = quads * (t + 1) / threads * 4;
    *first = a < n ? a : n;
    *last = b < n ? b : n;
}

/* out = x @ w.T (+ bias) (+ residual): x [n_in], w [n_out, n_in] in fp32 or (w_bf16) bf16, bias and
   residual [n_out] or NULL; everything but w fp32, and the sums in fp32. */
int codedojo_linear_row(const float *x, const void *w, const float *bias, const float *residual, float *out,
                        int64_t n_out, int n_in, int w_bf16, int threads) {
    if (n_out < 0 || n_in < 1 || threads < 1) return -1;
#pragma omp parallel num_threads(threads)
    {
        int64_t first, last;
        thread_rows(n_out, omp_get_thread_num(), omp_get_num_threads(), &first, &last);
        if (w_bf16)
            rows_dot(x, w, first, last, n_in, out, 1);
        else
            rows_dot(x, w, first, last, n_in, out, 0);
        for (int64_t i = first; i < last; i++) {
            if (bias) out[i] += bias[i];
            if (residual) out[i] += residual[i];
        }
    }
    return 0;
}

static inline float silu_times(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

/* SwiGLU's first half for one row: out[i] = silu(x . w[i] + b[i]) * (x . w[n + i] + b[n + i]) for i < n,
   w [2n, n_in] the gate rows then the up rows (HF's gate_proj over up_proj) in fp32 or (w_bf16) bf16,
   bias [2n] or NULL. */
int codedojo_swiglu_row(const float *x, const void *w, const float *bias, float *out, int64_t n, int n_in,
                        int w_bf16, int threads) {
    size_t element = w_bf16 ? 2 : 4;
    if (n < 0 || n_in < 1 || threads < 1) return -1;
#pragma omp parallel num_threads(threads)
    {
        int64_t first, last;
        thread_rows(n, omp_get_thread_num(), omp_get_num_threads(), &first, &last);
        float gate[256], up[256];
        for (int64_t start = first; start < last; start += 256) {
            int64_t stop = start + 256 < last ? start + 256 : last;
            const char *gates = (const char *)w + (size_t)(start * n_in) * element;
            const char *ups = (const char *)w + (size_t)((n + start) * n_in) * element;
            if (w_bf16) {
                rows_dot(x, gates, 0, stop - start, n_in, gate, 1);
                rows_dot(x, ups, 0, stop - start, n_in, up, 1);
            } else {
                rows_dot(x, gates, 0, stop - start, n_in, gate, 0);
                rows_dot(x, ups, 0, stop - start, n_in, up, 0);
            }
            for (int64_t i = start; i < stop; i++) {
                float g = gate[i - start] + (bias ? bias[i] : 0.0f);
                float u = up[i - start] + (bias ? bias[n + i] : 0.0f);
                out[i] = silu_times(g, u);
            }
        }
    }
    return 0;
}

/* ---- Linear layers of a few rows (batched decode) ------------------------------------------------------

A decode step of m rows (2 to a few dozen) multiplies m rows by every matrix: each weight is read from memory
once and used m times, so the step sits near the machine's ridge point, and a kernel is as fast as it keeps
the weights arriving while it multiplies. These read the matrices in HF's layout ([out, in], contiguous):
each thread takes one contiguous range of output rows in tiles of six, and a tile's six weight rows stay in
the first-level cache while every pair of input rows goes through them (twelve running sums of eight lanes).
While a tile is multiplied, the lines of the tile ROWS_AHEAD tiles further on are prefetched, spread over the
tile's passes: without it the stream stalls on memory and the kernel was no faster than oneDNN on these
shapes; with it, `bench/engine_steps.py --only few_rows` times it against oneDNN. Sums are in fp32, in another order than
oneDNN's: the same values to fp32 rounding. */

#ifndef ROWS_AHEAD
#define ROWS_AHEAD 3
#endif
#define TILE 6

static inline float dot_plain(const float *a, const float *b, int n) {
    float total = 0.0f;
    for (int e = 0; e < n; e++) total += a[e] * b[e];
    return total;
}

/* Six weight rows: three at wa (stride n_in) and three at wb. A linear layer's tile is six consecutive rows
   (wb = wa + 3 rows); SwiGLU's is three gate rows and the three up rows that pair with them. */
typedef struct {
    const float *wa, *wb;
} tile_rows;

/* out[r * 6 + j] = x_r . w_j for the mr (1 or 2) rows of x at x and x + ldx; n_in a multiple of 8. The lines of
   `next` (NULL: none) that this pass is to fetch are prefetched: weight rows j with j % passes == pass. */
static inline __attribute__((always_inline)) void rows_tile(const float *x, int64_t ldx, int mr, tile_rows w,
                                                            int n_in, tile_rows next, int pass, int passes,
                                                            float *out) {
#if HAVE_VECTOR
    __m256 a0[TILE], a1[TILE];
    for (int j = 0; j < TILE; j++) a0[j] = a1[j] = _mm256_setzero_ps();
    for (int e = 0; e < n_in; e += 8) {
        if (next.wa && (e & 15) == 0)
            for (int j = pass; j < TILE; j += passes) {
                const float *row = j < 3 ? next.wa + (int64_t)j * n_in : next.wb + (int64_t)(j - 3) * n_in;
                _mm_prefetch((const char *)(row + e), _MM_HINT_T0);
            }
        __m256 x0 = _mm256_loadu_ps(x + e);
        __m256 x1 = mr > 1 ? _mm256_loadu_ps(x + ldx + e) : x0;
        for (int j = 0; j < TILE; j++) {
            const float *row = j < 3 ? w.wa + (int64_t)j * n_in : w.wb + (int64_t)(j - 3) * n_in;
            __m256 wj = _mm256_loadu_ps(row + e);
            a0[j] = _mm256_fmadd_ps(x0, wj, a0[j]);
            if (mr > 1) a1[j] = _mm256_fmadd_ps(x1, wj, a1[j]);
        }
    }
    __m256 zero = _mm256_setzero_ps();
    float lanes[8];
    _mm256_storeu_ps(lanes, sum8(a0[0], a0[1], a0[2], a0[3], a0[4], a0[5], zero, zero));
    memcpy(out, lanes, sizeof(float) * TILE);
    if (mr > 1) {
        _mm256_storeu_ps(lanes, sum8(a1[0], a1[1], a1[2], a1[3], a1[4], a1[5], zero, zero));
        memcpy(out + TILE, lanes, sizeof(float) * TILE);
    }
#else
    (void)next, (void)pass, (void)passes;
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < TILE; j++) {
            const float *row = j < 3 ? w.wa + (int64_t)j * n_in : w.wb + (int64_t)(j - 3) * n_in;
            out[r * TILE + j] = dot_plain(x + r * ldx, row, n_in);
        }
#endif
}

/* Tile i's six weight rows: a linear layer's six consecutive rows, or (swiglu) three gate rows and their up rows
   n further on. */
static inline tile_rows rows_of(const float *w, int64_t i, int64_t n, int n_in, int swiglu) {
    if (swiglu) return (tile_rows){w + i * 3 * n_in, w + (n + i * 3) * n_in};
    return (tile_rows){w + i * TILE * n_in, w + (i * TILE + 3) * n_in};
}

/* Tiles [first, last) of one thread, every pair of x's rows through each tile, and their sums written out:
   a linear layer's out[r, 6i + j] = sum (+ bias) (+ residual); SwiGLU's out[r, 3i + j] = silu(gate) * up.
   n: the layer's output rows (linear) or SwiGLU's width (half of w's rows). */
static inline __attribute__((always_inline)) void run_tiles(const float *x, int m, int n_in, const float *w,
                                                            int64_t n, int swiglu, const float *bias,
                                                            const float *residual, float *out, int64_t first,
                                                            int64_t last) {
    float res[2 * TILE];
    int passes = (m + 1) / 2;
    for (int64_t i = first; i < last; i++) {
        tile_rows now = rows_of(w, i, n, n_in, swiglu), next = {NULL, NULL};
        if (i + ROWS_AHEAD < last) next = rows_of(w, i + ROWS_AHEAD, n, n_in, swiglu);
        for (int r = 0, pass = 0; r < m; r += 2, pass++) {
            int mr = m - r < 2 ? m - r : 2;
            const float *xr = x + (int64_t)r * n_in;
            if (mr == 2)
                rows_tile(xr, n_in, 2, now, n_in, next, pass, passes, res);
            else
                rows_tile(xr, n_in, 1, now, n_in, next, pass, passes, res);
            for (int q = 0; q < mr; q++) {
                const float *sums = res + q * TILE;
                int64_t row = r + q;
                if (swiglu) {
                    for (int j = 0; j < 3; j++) {
                        int64_t col = i * 3 + j;
                        out[row * n + col] = silu_times(sums[j] + (bias ? bias[col] : 0.0f),
                                                        sums[3 + j] + (bias ? bias[n + col] : 0.0f));
                    }
                } else {
                    for (int j = 0; j < TILE; j++) {
                        int64_t col = i * TILE + j, at = row * n + col;
                        out[at] = sums[j] + (bias ? bias[col] : 0.0f) + (residual ? residual[at] : 0.0f);
                    }
                }
            }
        }
    }
}

/* out = x @ w.T (+ bias) (+ residual): x [m, n_in], w [n_out, n_in], bias [n_out] or NULL, residual [m, n_out]
   or NULL, out [m, n_out], all fp32 and contiguous. out may be residual itself (each element is read before it
   is written, by the thread that writes it). */
int codedojo_linear_rows(const float *x, const float *w, const float *bias, const float *residual, float *out,
                         int m, int64_t n_out, int n_in, int threads) {
    if (m < 1 || n_out < 0 || n_in < 1 || threads < 1) return -1;
    int64_t tiles = HAVE_VECTOR && n_in % 8 == 0 ? n_out / TILE : 0;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), count = omp_get_num_threads();
        run_tiles(x, m, n_in, w, n_out, 0, bias, residual, out, tiles * t / count, tiles * (t + 1) / count);
        /* the rows past the last whole tile (all of them where n_in is not a multiple of 8), in plain loops */
        int64_t rest = n_out - tiles * TILE;
        int64_t from = tiles * TILE + rest * t / count, to = tiles * TILE + rest * (t + 1) / count;
        for (int64_t col = from; col < to; col++)
            for (int r = 0; r < m; r++) {
                int64_t at = (int64_t)r * n_out + col;
                out[at] = dot_plain(x + (int64_t)r * n_in, w + col * n_in, n_in) + (bias ? bias[col] : 0.0f) +
                          (residual ? residual[at] : 0.0f);
            }
    }
    return 0;
}

/* SwiGLU's first half for m rows: out[r, i] = silu(x_r . w[i] + b[i]) * (x_r . w[n + i] + b[n + i]) for i < n,
   w [2n, n_in] the gate rows then the up rows, bias [2n] or NULL, out [m, n]; all fp32 and contiguous. */
int codedojo_swiglu_rows(const float *x, const float *w, const float *bias, float *out, int m, int64_t n,
                         int n_in, int threads) {
    if (m < 1 || n < 0 || n_in < 1 || threads < 1) return -1;
    int64_t tiles = HAVE_VECTOR && n_in % 8 == 0 ? n / 3 : 0; /* a tile: three gate rows and their up rows */
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), count = omp_get_num_threads();
        run_tiles(x, m, n_in, w, n, 1, bias, NULL, out, tiles * t / count, tiles * (t + 1) / count);
        int64_t rest = n - tiles * 3;
        int64_t from = tiles * 3 + rest * t / count, to = tiles * 3 + rest * (t + 1) / count;
        for (int64_t col = from; col < to; col++)
            for (int r = 0; r < m; r++) {
                const float *xr = x + (int64_t)r * n_in;
                float gate = dot_plain(xr, w + col * n_in, n_in) + (bias ? bias[col] : 0.0f);
                float up = dot_plain(xr, w + (n + col) * n_in, n_in) + (bias ? bias[n + col] : 0.0f);
                out[(int64_t)r * n + col] = silu_times(gate, up);
            }
    }
    return 0;
}
