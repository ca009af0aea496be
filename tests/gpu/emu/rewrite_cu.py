#!/usr/bin/env python3
"""Rewrites a CUDA source of sinklab into C++ for the CPU emulation (tests/gpu/emu/cuda_emu.hpp).

    rewrite_cu.py --out-dir DIR [--plant NAME] SRC...   DIR/<stem>.cpp per source, DIR/backend/... per .cuh
                                                         (each written only when its text changes)
    rewrite_cu.py --sources            the sources the emulation rewrites (src/backend/cuda, src/parallel/*.cu)
    rewrite_cu.py --list               the planted bugs: "name|file|test|sources to rewrite" (for CMake)
    rewrite_cu.py --describe           the planted bugs, one per line, for people
    rewrite_cu.py --filter             "name test gtest-filter" per planted bug (for tests/gpu/emulate.sh)

Only three things change; everything else (the CUDA headers, qualifiers, intrinsics) is resolved by the
shadow headers in tests/gpu/emu/include:
  kernel<<<grid, block[, smem[, stream]]>>>(args);
        -> ::emu::launch("kernel", ::emu::fn_addr(kernel), [&] { kernel(args); }, grid, block[, smem[, stream]]);
  __shared__ T a[N], b[M];
        -> static T a[N]; ::emu::shared_decl(&a, sizeof a); static T b[M]; ::emu::shared_decl(&b, sizeof b);
  extern __shared__ [__align__(n)] T smem[];
        -> T* smem = ::emu::dyn_smem<T>();
Line numbers are kept (#line), so compiler messages point into the .cu.

--plant NAME first applies one planted bug (PLANTS below: one exact text replacement in one file, which
must occur exactly once); tests/gpu/emulate.sh --plant builds the planted copy and expects its test to fail.
"""
import os
import re
import sys

# Each planted bug: the kernel it breaks, the emulated test that must turn red (binary; gtest filter), and
# one exact replacement in the source. Kept small and plausible: an off-by-one, a wrong stride or index, a
# missing barrier, a wrong scale.
PLANTS = [
    # memory.cu
    dict(name='fill_offset', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.FillAdd*',
         what='fill writes element i at the offset of i + 1 (an off-by-one in the grid-stride index)',
         old='SL_GRID_LOOP(i, ro.numel) store_from_double(out, dt, ro.offset(i), value);',
         new='SL_GRID_LOOP(i, ro.numel) store_from_double(out, dt, ro.offset(i + 1 < ro.numel ? i + 1 : i), value);'),
    dict(name='convert_stride', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.CopyRoundTrips*',
         what='the dtype-converting copy reads the source with the destination\'s row layout',
         old='store_from_double(dst, ddt, rd.offset(i), load_as_double(src, sdt, rs.offset(i)));',
         new='store_from_double(dst, ddt, rd.offset(i), load_as_double(src, sdt, rd.offset(i)));'),
    dict(name='reduce_tree_sync', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.FillAdd*',
         what='sum_squares / max_abs block tree: the __syncthreads between tree levels removed',
         old='      shared[threadIdx.x] = reduce_combine(shared[threadIdx.x], shared[threadIdx.x + width], max_abs);\n    __syncthreads();',
         new='      shared[threadIdx.x] = reduce_combine(shared[threadIdx.x], shared[threadIdx.x + width], max_abs);'),
    dict(name='column_sum_rows', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.ColumnSum*',
         what='column_sum skips the last row of each column (loop bound L - 1)',
         old='for (int64_t l = 0; l < L; ++l) sum +=', new='for (int64_t l = 0; l + 1 < L; ++l) sum +='),
    dict(name='philox_index', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.RandomFills*:CudaBackend.Philox*',
         what='fill_normal draws Philox value i + 1 for element i',
         old='philox_normal(seed, stream, uint64_t(i))', new='philox_normal(seed, stream, uint64_t(i) + 1)'),
    dict(name='uniform_scale', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.RandomFills*:CudaBackend.Philox*',
         what='fill_uniform scales by (high + low) instead of (high - low)',
         old='low + (high - low) * u', new='low + (high + low) * u'),
    # elementwise.cu
    dict(name='copy_raw_stride', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.CopyRoundTrips*',
         what='the same-dtype strided copy reads the source through the destination\'s layout',
         old='SL_GRID_LOOP(i, rd.numel) dst[rd.offset(i)] = src[rs.offset(i)];', new='SL_GRID_LOOP(i, rd.numel) dst[rd.offset(i)] = src[rd.offset(i)];'),
    dict(name='add_operand', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.FillAdd*:CudaBackendBf16.*',
         what='add reads a twice (a + a instead of a + b)',
         old='out[0] = in[0] + in[1];', new='out[0] = in[0] + in[0];'),
    dict(name='accumulate_assign', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.FillAdd*:CudaBackendBf16.*',
         what='accumulate assigns (=) instead of adding (+=)',
         old='out[0] = in[0] + alpha * in[1];', new='out[0] = alpha * in[1];'),
    dict(name='scale_last', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackend.FillAdd*:CudaBackendBf16.*',
         what='scale leaves the last element (element count numel - 1)',
         old='ew_launch(stream_, ScaleOp{float(factor)}, ins, ins, x.numel(), op);',
         new='ew_launch(stream_, ScaleOp{float(factor)}, ins, ins, x.numel() - 1, op);'),
    dict(name='reduce_into_accumulate', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackendBf16.ReduceInto*',
         what='reduce_into with accumulate overwrites the device scalar instead of combining with it',
         old='*out = accumulate ? reduce_combine(*out, total, max_abs) : total;', new='*out = total;'),
    dict(name='reduce_sum_term', file='src/backend/cuda/memory.cu', test='test_cuda_backend', filter='CudaBackendBf16.ReduceInto*',
         what='reduce_into\'s plain sum adds |x| instead of x',
         old='return kind == Reduction::sum ? v :', new='return kind == Reduction::sum ? fabs(v) :'),
    # elementwise.cuh: the engine (a plant here rebuilds every source that includes it)
    dict(name='ew_tail_start', file='src/backend/cuda/elementwise.cuh', test='test_cuda_backend', filter='CudaBackend.FillAdd*:CudaBackendBf16.*',
         what='the contiguous kernel\'s scalar loop starts one element late (the element after the vector chunks is never written)',
         old='for (int64_t i = n_vec * kEwVec + int64_t(blockIdx.x)', new='for (int64_t i = n_vec * kEwVec + 1 + int64_t(blockIdx.x)'),
    dict(name='ew_bf16_halves', file='src/backend/cuda/elementwise.cuh', test='test_cuda_backend', filter='CudaBackendBf16.*',
         what='the 128-bit bf16 load takes element 2k from the high half of word k (pairs swapped)',
         old='v[2 * k] = bits_f32(b.w[k] << 16);', new='v[2 * k] = bits_f32(b.w[k] & 0xffff0000u);'),
    dict(name='ew_strided_row', file='src/backend/cuda/elementwise.cuh', test='test_cuda_backend', filter='CudaBackend.Activations*:CudaBackendBf16.*',
         what='the strided kernel reads each strided input from the previous row',
         old='xe[k] = ew_load(in.a[k].p, in.a[k].bf16, in.a[k].rows.offset(i));',
         new='xe[k] = ew_load(in.a[k].p, in.a[k].bf16, in.a[k].rows.offset(i >= in.a[k].rows.cols ? i - in.a[k].rows.cols : i));'),
    # elementwise.cu: the engine's functors
    dict(name='gated_backward_act', file='src/backend/cuda/elementwise.cu', test='test_cuda_backend', filter='CudaBackend.Activations*',
         what='gated_backward: d_up uses the derivative act\'(gate) instead of act(gate)',
         old='out[1] = dy * math::activate(act, g);', new='out[1] = dy * math::activate_grad(act, g);'),
    dict(name='adamw_m_store', file='src/backend/cuda/elementwise.cu', test='test_cuda_backend', filter='CudaBackend.AdamW*',
         what='adamw stores the new v into m',
         old='out[1] = m;', new='out[1] = v;'),
    dict(name='activation_backward_grad', file='src/backend/cuda/elementwise.cu', test='test_cuda_backend', filter='CudaBackend.Activations*',
         what='activation_backward multiplies by act(x) instead of act\'(x)',
         old='out[0] = in[0] * math::activate_grad(act, in[1]);', new='out[0] = in[0] * math::activate(act, in[1]);'),
    dict(name='gated_forward_swap', file='src/backend/cuda/elementwise.cu', test='test_cuda_backend', filter='CudaBackend.Activations*',
         what='gated_forward activates up instead of gate',
         old='out[0] = math::activate(act, in[0]) * in[1];', new='out[0] = math::activate(act, in[1]) * in[0];'),
    # embedding.cu
    dict(name='embedding_forward_row', file='src/backend/cuda/embedding.cu', test='test_cuda_embedding', filter='*',
         what='embedding_forward gathers table row id - 1 (an off-by-one in the row index)',
         old='t = valid ? table.rows.row_offset(id) : 0;', new='t = valid ? table.rows.row_offset(id > 0 ? id - 1 : 0) : 0;'),
    dict(name='embedding_convert_column', file='src/backend/cuda/embedding.cu', test='test_cuda_embedding', filter='CudaEmbeddingBf16.*',
         what='embedding_forward\'s converting gather (f32 table, bf16 rows) reads column c - 1',
         old='ew_store(out.p, out.bf16, o + c, ew_load(table.p, table.bf16, t + c));',
         new='ew_store(out.p, out.bf16, o + c, ew_load(table.p, table.bf16, t + (c > 0 ? c - 1 : 0)));'),
    dict(name='embedding_backward_bucket', file='src/backend/cuda/embedding.cu', test='test_cuda_embedding', filter='*',
         what='embedding_backward stops each id bucket one row early',
         old='for (int64_t q = p; q < n_rows && sorted_ids[q] == id; ++q)',
         new='for (int64_t q = p; q + 1 < n_rows && sorted_ids[q] == id; ++q)'),
    # norms.cu and column_reduce.cuh
    dict(name='embedding_keys_rows', file='src/backend/cuda/embedding.cu', test='test_cuda_embedding', filter='*',
         what='embedding_backward\'s sort values: row n - 1 for row n',
         old='rows[n] = uint32_t(n);', new='rows[n] = uint32_t(n > 0 ? n - 1 : 0);'),
    dict(name='norm_block_sum_sync', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='*',
         what='norms block_sum: the __syncthreads before thread 0 sums the warps\' partials removed',
         old='  if (lane == 0) shared[warp] = v;\n  __syncthreads();', new='  if (lane == 0) shared[warp] = v;'),
    dict(name='norm_shuffle', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='*',
         what='norms block_sum: the warp butterfly starts at offset 8 (lanes 16..31 never reach lane 0)',
         old='for (int o = 16; o > 0; o >>= 1)', new='for (int o = 8; o > 0; o >>= 1)'),
    dict(name='add_rmsnorm_unrounded', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='CudaNormsBf16.*',
         what='add_rmsnorm_forward: the norm reads the sum before it is rounded to sum_out\'s dtype',
         old='x = ew_stored(sum_out.bf16, x + ew_load(addend.p, addend.bf16, ao + i));',
         new='x = x + ew_load(addend.p, addend.bf16, ao + i);'),
    dict(name='rmsnorm_accumulate_dropped', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='CudaNormsBf16.*',
         what='rmsnorm_backward with accumulate writes dx instead of adding it to d_in',
         old='accumulate ? ew_load(d_in.p, d_in.bf16, dxo + i) + v : v', new='v'),
    dict(name='layernorm_mean', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='*LayerNorm*',
         what='layernorm_forward divides the row sum by d - 1',
         old='const double mu = block_sum(s, shared) / double(d);', new='const double mu = block_sum(s, shared) / double(d > 1 ? d - 1 : d);'),
    dict(name='rmsnorm_sum', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='*RmsNorm*:*ManyRows*',
         what='rmsnorm_forward: each thread leaves the first element of its stride out of the sum of squares',
         old='      ss += double(x) * double(x);', new='      ss += i == threadIdx.x ? 0.0 : double(x) * double(x);'),
    dict(name='rmsnorm_backward_mean', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='*RmsNorm*',
         what='rmsnorm_backward divides the dot product by d + 1',
         old='const double dot_over_d = dot / double(d), r = double(rstd[row]);', new='const double dot_over_d = dot / double(d + 1), r = double(rstd[row]);'),
    dict(name='layernorm_backward_sum', file='src/backend/cuda/norms.cu', test='test_cuda_norms', filter='*LayerNorm*',
         what='layernorm_backward: mean(g w) taken from the sum of g w xhat',
         old='const double mean_gh = block_sum(sum_gh, shared) / double(d);', new='const double mean_gh = block_sum(sum_gh_xh, shared) / double(d);'),
    dict(name='column_reduce_lanes', file='src/backend/cuda/column_reduce.cuh', test='test_cuda_norms', filter='*',
         what='column_reduce: the lane sums skip the last of the 8 lanes',
         old='for (int l = 1; l < kColReduceLanes; ++l)', new='for (int l = 1; l + 1 < kColReduceLanes; ++l)'),
    dict(name='column_reduce_chunks', file='src/backend/cuda/column_reduce.cuh', test='test_cuda_norms', filter='*',
         what='column_reduce_final: the sum over the row chunks leaves out chunk 0',
         old='for (int64_t ch = 0; ch < chunks; ++ch) s += partials', new='for (int64_t ch = 1; ch < chunks; ++ch) s += partials'),
    # rope.cu
    dict(name='rope_sin_sign', file='src/backend/cuda/rope.cu', test='test_cuda_rope', filter='*',
         what='rope_backward rotates forwards (the sign flip of sin dropped)',
         old='sign < 0.0f ? -s : s', new='s'),
    dict(name='rope_head_stride', file='src/backend/cuda/rope.cu', test='test_cuda_rope', filter='*',
         what='rope reads x with out\'s head stride',
         old='const int64_t xi = b * g.xs0 + t * g.xs1 + h * g.xs2;', new='const int64_t xi = b * g.xs0 + t * g.xs1 + h * g.os2;'),
    # cross_entropy.cu
    dict(name='rope_table_freq', file='src/backend/cuda/rope.cu', test='test_cuda_rope', filter='*',
         what='the rope table uses frequency i + 1 for pair i',
         old='math::rope_cos_sin(p, math::rope_inv_freq(i, cfg), c, s);', new='math::rope_cos_sin(p, math::rope_inv_freq(i + 1, cfg), c, s);'),
    dict(name='ce_tree_half', file='src/backend/cuda/cross_entropy.cu', test='test_cuda_cross_entropy', filter='*',
         what='cross_entropy\'s block tree starts at a quarter of the block (half the threads\' summaries dropped)',
         old='for (int width = kCeThreads / 2; width > 0; width /= 2)', new='for (int width = kCeThreads / 4; width > 0; width /= 2)'),
    dict(name='ce_grad_scale', file='src/backend/cuda/cross_entropy.cu', test='test_cuda_cross_entropy', filter='*',
         what='cross_entropy\'s gradient ignores grad_scale',
         old='j == t, grad_scale));', new='j == t, 1.0f));'),
    # multi_tensor.cu
    dict(name='mt_chunk_size', file='src/backend/cuda/multi_tensor.cu', test='test_cuda_multi_tensor', filter='*',
         what='the chunk table cuts chunks one element short (the last element of every full chunk is skipped)',
         old='int32_t(std::min(kChunk, ranges.ranges[r].end - b))', new='int32_t(std::min(kChunk - 1, ranges.ranges[r].end - b))'),
    dict(name='mt_tree_sync', file='src/backend/cuda/multi_tensor.cu', test='test_cuda_multi_tensor', filter='*SumSquares*',
         what='the chunks\' block tree: the __syncthreads between tree levels removed',
         old='shared[threadIdx.x] += shared[threadIdx.x + width];\n    __syncthreads();',
         new='shared[threadIdx.x] += shared[threadIdx.x + width];'),
    dict(name='mt_tag_select', file='src/backend/cuda/multi_tensor.cu', test='test_cuda_multi_tensor', filter='*SumSquares*',
         what='sum_squares_ranges adds the partials of every tag up to t into out[t]',
         old='if (chunks[c].tag == t) s += partials[c];', new='if (chunks[c].tag <= t) s += partials[c];'),
    dict(name='mt_adamw_decay_tag', file='src/backend/cuda/multi_tensor.cu', test='test_cuda_multi_tensor', filter='*AdamW*',
         what='adamw_update_ranges decays the tag-0 ranges and not the tag-1 ones',
         old='k.decay = ch.tag == 1 ? decay : c.decay;', new='k.decay = ch.tag == 0 ? decay : c.decay;'),
    dict(name='mt_adamw_lp', file='src/backend/cuda/multi_tensor.cu', test='test_cuda_multi_tensor', filter='*AdamW*',
         what='adamw_update_ranges writes the new first moment into param_lp instead of the parameter',
         old='if (param_lp) ew_store(param_lp, lp_bf16, e, p);', new='if (param_lp) ew_store(param_lp, lp_bf16, e, mi);'),
    # linear.cu: the cuBLASLt / cuBLAS layouts (checked by the stand-in)
    dict(name='lt_ld_a', file='src/backend/cuda/linear.cu', test='test_cuda_linear', filter='*',
         what='cuBLASLt: the first operand\'s layout gets the wrong leading dimension (ld of A for our B)',
         old='plan.a = std::make_unique<LtLayout>(g.b.dt, g.tb ? g.K : g.N, g.tb ? g.N : g.K, g.b.ld, g.batch, g.b.batch_stride);',
         new='plan.a = std::make_unique<LtLayout>(g.b.dt, g.tb ? g.K : g.N, g.tb ? g.N : g.K, g.a.ld, g.batch, g.b.batch_stride);'),
    dict(name='lt_transpose', file='src/backend/cuda/linear.cu', test='test_cuda_linear', filter='*',
         what='cuBLASLt: TRANSA from our A\'s transpose instead of our B\'s',
         old='  const cublasOperation_t opa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt\'s A is our B',
         new='  const cublasOperation_t opa = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt\'s A is our B'),
    dict(name='lt_batch_stride', file='src/backend/cuda/linear.cu', test='test_cuda_linear', filter='*Matmul*',
         what='cuBLASLt: D\'s strided-batch offset is A\'s',
         old='plan.c = std::make_unique<LtLayout>(g.c.dt, g.N, g.M, g.c.ld, g.batch, g.c.batch_stride);',
         new='plan.c = std::make_unique<LtLayout>(g.c.dt, g.N, g.M, g.c.ld, g.batch, g.a.batch_stride);'),
    dict(name='cublas_fallback_ldc', file='src/backend/cuda/linear.cu', test='test_cuda_linear', filter='*',
         what='the cuBLAS fallback passes ldc = N (the packed width) instead of C\'s row stride',
         old='int(g.c.ld), g.c.batch_stride, int(g.batch), CUBLAS_COMPUTE_32F,',
         new='int(g.N), g.c.batch_stride, int(g.batch), CUBLAS_COMPUTE_32F,'),
    dict(name='bias_grad_ld', file='src/backend/cuda/linear.cu', test='test_cuda_linear', filter='*',
         what='d_bias column reduction reads d_out with ld = cols (wrong for strided d_out)',
         old='column_reduce(*this, BiasGradTerm{dy.ptr, d_out.dtype, dy.ld}', new='column_reduce(*this, BiasGradTerm{dy.ptr, d_out.dtype, dy.cols}'),
    # attention.cu (reference kernels)
    dict(name='bias_rows_stride', file='src/backend/cuda/linear.cu', test='test_cuda_linear', filter='*',
         what='the bias-rows kernel (K = 0 products, the fallback\'s strided bias) ignores the bias stride',
         old='if (bias) y += float(load_as_double(bias, dt, col * bias_stride));', new='if (bias) y += float(load_as_double(bias, dt, col));'),
    dict(name='attn_forward_chunk', file='src/backend/cuda/attention.cu', test='test_cuda_attention', filter='CudaAttention.EveryVariant*',
         what='attention forward: the last key of every chunk of 128 is left out of the output sum',
         old='for (int64_t cc = 0; cc < chunk; ++cc) a = fmaf(w[cc]', new='for (int64_t cc = 0; cc + 1 < chunk; ++cc) a = fmaf(w[cc]'),
    dict(name='attn_reduce_sync', file='src/backend/cuda/attention_rows.cuh', test='test_cuda_attention', filter='CudaAttention.EveryVariant*',
         what='attention block_reduce (attention_rows.cuh): the __syncthreads after publishing the thread values removed',
         old='  red[threadIdx.x] = x;\n  __syncthreads();', new='  red[threadIdx.x] = x;'),
    dict(name='attn_dk_scale', file='src/backend/cuda/attention.cu', test='test_cuda_attention', filter='CudaAttention.EveryVariant*',
         what='attention backward (key-major kernel): dk misses the score scale',
         old='if (g.dk.p) g.dk.at(b, j, kvh)[e] = g.scale * acc_k[e];', new='if (g.dk.p) g.dk.at(b, j, kvh)[e] = acc_k[e];'),
    # attention_flash.cu
    dict(name='attn_dq_scale', file='src/backend/cuda/attention.cu', test='test_cuda_attention', filter='CudaAttention.EveryVariant*',
         what='attention backward (query-major kernel): dq misses the score scale',
         old='for (int64_t e = tid; e < g.dh; e += kAttnThreads) dq[e] = g.scale * acc[e];', new='for (int64_t e = tid; e < g.dh; e += kAttnThreads) dq[e] = acc[e];'),
    dict(name='attn_distance_pairs', file='src/backend/cuda/attention.cu', test='test_cuda_attention', filter='CudaAttention.EveryVariant*',
         what='relative-bias backward: distance n > 0 sums one pair too few',
         old='const int64_t pairs = n > 0 ? g.T - n : g.T * g.T;', new='const int64_t pairs = n > 0 ? g.T - n - 1 : g.T * g.T;'),
    dict(name='attn_sink_batches', file='src/backend/cuda/attention.cu', test='test_cuda_attention', filter='CudaAttention.EveryVariant*',
         what='d_sink_logit sums batch element 0 only',
         old='for (int64_t b = 0; b < g.B; ++b) {\n        double acc_b = 0.0;', new='for (int64_t b = 0; b < 1; ++b) {\n        double acc_b = 0.0;'),
    dict(name='flash_lane_pairs', file='src/backend/cuda/attention_flash.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.*',
         what='flash forward: the row sum misses the partner lane (shuffle with lane ^ 2 instead of ^ 1)',
         old='terms += __shfl_xor_sync(0xffffffffu, terms, 1);', new='terms += __shfl_xor_sync(0xffffffffu, terms, 2);'),
    dict(name='flash_tile_sync', file='src/backend/cuda/attention_flash.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.*',
         what='flash forward: the __syncthreads after loading a K/V tile removed',
         old='    load_tile<IO>(Vs, ldb, g.v, b, j0, nk, kvh, g.dh, DP, kBKf);\n    __syncthreads();\n    // S = Q K^T',
         new='    load_tile<IO>(Vs, ldb, g.v, b, j0, nk, kvh, g.dh, DP, kBKf);\n    // S = Q K^T'),
    dict(name='flash_dkv_layout', file='src/backend/cuda/attention_flash.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.*',
         what='flash dK/dV: P read row-major instead of transposed (col_major) for dV += P^T dO',
         old='warp_mma<wmma::col_major, wmma::row_major>(dVf + m0 * ldf + n0, ldf, Pb + m0, ldp, dOs + n0, ldb, kBQ, true);',
         new='warp_mma<wmma::row_major, wmma::row_major>(dVf + m0 * ldf + n0, ldf, Pb + m0, ldp, dOs + n0, ldb, kBQ, true);'),
    # attention_flash_mma.cu (mma.sync, ldmatrix, cp.async: the emulation's emu_ptx.hpp) and attention_flash.cuh
    dict(name='mma_cp_async_wait', file='src/backend/cuda/attention_flash_mma.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.Bf16*',
         what='flash mma pipeline: tile t + 1 prefetched, then no cp.async wait before tile t is read',
         old='    load(t + 1);\n    ptx::cp_async_wait<1>();', new='    load(t + 1);'),
    dict(name='mma_p_fragment', file='src/backend/cuda/attention_flash_mma.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.Bf16*',
         what='flash mma: P as an A fragment takes rows g + 8 from n-tile 2 kk + 1 (the registers of the C layout mixed up)',
         old='a[1] = ptx::pack_bf16x2(acc[2 * kk][2], acc[2 * kk][3]);', new='a[1] = ptx::pack_bf16x2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);'),
    dict(name='mma_ldmatrix_trans', file='src/backend/cuda/attention_flash_mma.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.Bf16*',
         what='flash mma: the [k][n] operands (V, K, dO, Q) loaded by ldmatrix without .trans',
         old='ptx::ldmatrix_x4_trans(b, tile', new='ptx::ldmatrix_x4(b, tile'),
    dict(name='mma_zero_fill', file='src/backend/cuda/attention_flash_mma.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.Bf16*',
         what='flash mma: cp.async copies 16 bytes of the tensor\'s first row instead of zero-filling padded rows and columns',
         old='ptx::cp_async_16(dst + r * (D + kPad) + c * 8, from, real ? 16 : 0);', new='ptx::cp_async_16(dst + r * (D + kPad) + c * 8, from, 16);'),
    dict(name='mma_dkv_sync', file='src/backend/cuda/attention_flash_mma.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.Bf16*',
         what='flash mma dK/dV: the __syncthreads after a query tile removed (its buffers and row statistics reloaded while read)',
         old='    mma_pb<D, kColsQ / 8>(dk, dpt, Qt, l);\n    __syncthreads();', new='    mma_pb<D, kColsQ / 8>(dk, dpt, Qt, l);'),
    dict(name='flash_tile_visible', file='src/backend/cuda/attention_flash.cuh', test='test_cuda_attention_fast', filter='CudaAttentionFlash.Bf16*',
         what='flash: a tile counts as wholly visible by its last row\'s key range (the diagonal tiles go unmasked)',
         old='j0 + n <= math::attn_key_end(c, i0, S);', new='j0 + n <= math::attn_key_end(c, i1 - 1, S);'),
    # attention_gemm.cu: the GEMM path (cuBLASLt layouts checked by the stand-in, row kernels by the test)
    dict(name='gemm_row_d', file='src/backend/cuda/attention_gemm.cu', test='test_cuda_attention_fast', filter='CudaAttentionGemm.*',
         what='GEMM path backward rows: D_i is this thread\'s partial sum, not the block\'s',
         old='D = float(block_reduce<kRowThreads, double, false>(part, red_d));', new='D = float(part);'),
    dict(name='gemm_row_norm', file='src/backend/cuda/attention_gemm.cu', test='test_cuda_attention_fast', filter='CudaAttentionGemm.*',
         what='GEMM path forward rows: P written without the 1 / Z of its row',
         old='p = math::attn_numer(cfg, math::attn_sim(cfg, score(g, srow, i, j), m)) * inv;',
         new='p = math::attn_numer(cfg, math::attn_sim(cfg, score(g, srow, i, j), m));'),
    dict(name='gemm_distance_pairs', file='src/backend/cuda/attention_gemm.cu', test='test_cuda_attention_fast', filter='CudaAttentionGemm.*',
         what='GEMM path relative-bias backward: distance n > 0 sums one pair too few',
         old='for (int64_t u = threadIdx.x; u < g.T - n; u += kRowThreads)', new='for (int64_t u = threadIdx.x; u + 1 < g.T - n; u += kRowThreads)'),
    dict(name='gemm_kv_head', file='src/backend/cuda/attention_gemm.cu', test='test_cuda_attention_fast', filter='CudaAttentionGemm.*',
         what='GEMM path forward: query head h scores against key head h % Hkv instead of h / group',
         old='be.matmul(sc.s, head_of(q, h), head_of(k, h / group), false, true, scale, 0.0);',
         new='be.matmul(sc.s, head_of(q, h), head_of(k, h % d.Hkv), false, true, scale, 0.0);'),
    # attention_cudnn.cpp: the SDPA graph's tensor strides (checked by the cuDNN stand-in)
    dict(name='flash_dq_scale', file='src/backend/cuda/attention_flash.cu', test='test_cuda_attention_fast', filter='CudaAttentionFlash.*',
         what='flash dQ kernel: dq misses the score scale',
         old='from_f32<IO>(g.scale * dQf[r * ldf + c]);', new='from_f32<IO>(dQf[r * ldf + c]);'),
    dict(name='cudnn_stride', file='src/backend/cuda/attention_cudnn.cpp', test='test_cuda_attention_fast', filter='CudaAttentionCudnn.*',
         what='cuDNN graph: the [B,L,H,dh] buffers described with the head and sequence strides swapped',
         old='return {s0, s2, s1, s3};', new='return {s0, s1, s2, s3};'),
    dict(name='cudnn_window', file='src/backend/cuda/attention_cudnn.cpp', test='test_cuda_attention_fast', filter='CudaAttentionCudnn.*',
         what='cuDNN graph: the sliding window\'s left bound off by one',
         old='a.set_diagonal_band_left_bound(int(key.window));', new='a.set_diagonal_band_left_bound(int(key.window) + 1);'),
    # nccl.cu: the collectives' counts and offsets (checked by the NCCL stand-in)
    dict(name='nccl_reduce_offset', file='src/parallel/nccl.cu', test='test_grad_sync', filter='GradientSync.OverNccl*',
         what='reduce-scatter: each rank\'s piece reduced from one element past its offset',
         old='ncclReduce(data + first, data + first, size_t(count)', new='ncclReduce(data + first + 1, data + first + 1, size_t(count)'),
    dict(name='nccl_allreduce_count', file='src/parallel/nccl.cu', test='test_grad_sync', filter='GradientSync.OverNccl*',
         what='all-reduce of n - 1 elements (the count off by one)',
         old='ncclAllReduce(data, data, size_t(n),', new='ncclAllReduce(data, data, size_t(n - 1),'),
    # mamba.cu (Jamba's ops)
    dict(name='conv1d_weight_stride', file='src/backend/cuda/mamba.cu', test='test_cuda_mamba', filter='CudaMamba.CausalConv1d*',
         what='causal_conv1d: channel c\'s taps read with stride 1 instead of K (weight + c, not weight + c * K)',
         old='weight + c * K, K,', new='weight + c, K,'),
    dict(name='scan_a_row', file='src/backend/cuda/mamba.cu', test='test_cuda_mamba', filter='CudaMamba.SelectiveScan*',
         what='selective_scan: channel d decays with the next channel\'s row of A',
         old='math::scan_a_from_log(double(a.A_log[d * a.N + n]))', new='math::scan_a_from_log(double(a.A_log[((d + 1) % a.Di) * a.N + n]))'),
    dict(name='topk_row_stride', file='src/backend/cuda/mamba.cu', test='test_cuda_mamba', filter='CudaMamba.RouterTopK*',
         what='moe_router_topk: row n\'s logits read at n * k instead of n * E',
         old='logits + n * E, E, k)', new='logits + n * k, E, k)'),
    dict(name='index_add_scale', file='src/backend/cuda/mamba.cu', test='test_cuda_mamba', filter='CudaMamba.IndexAddRows*',
         what='index_add_rows: the scale of sorted position q instead of source row m',
         old='const float f = scale ? scale[m] : 1.0f;', new='const float f = scale ? scale[q] : 1.0f;'),
    dict(name='index_keys_rows', file='src/backend/cuda/mamba.cu', test='test_cuda_mamba', filter='CudaMamba.IndexAddRows*',
         what='index_add_rows\' sort values: the source rows numbered backwards',
         old='rows[m] = uint32_t(m);', new='rows[m] = uint32_t(M - 1 - m);'),
]


def plant_table():
    return [p for p in PLANTS if p['old'] is not None]


def apply_plant(text, src, name):
    for p in plant_table():
        if p['name'] != name:
            continue
        if not src.replace(os.sep, '/').endswith(p['file']):
            return text  # another file's plant: this one stays as it is
        n = text.count(p['old'])
        if n != 1:
            sys.exit('rewrite_cu.py: plant %s: its text occurs %d times in %s (expected once)' % (name, n, src))
        return text.replace(p['old'], p['new'])
    sys.exit('rewrite_cu.py: no plant named %s' % name)


def split_top_level(s, sep=','):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{<':
            depth += 1
        elif ch in ')]}>':
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def rewrite(text):
    # extern __shared__ [__align__(n)] T name[];
    def dyn(m):
        return '%s* %s = ::emu::dyn_smem<%s>();' % (m.group(1), m.group(2), m.group(1))
    text = re.sub(r'extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;', dyn, text)

    # __shared__ T a[N], b[M];
    def static_shared(m):
        ty, decls = m.group(1), split_top_level(m.group(2))
        out = []
        for d in decls:
            name = re.match(r'(\w+)', d).group(1)
            out.append('static %s %s; ::emu::shared_decl(&%s, sizeof %s);' % (ty, d, name, name))
        return ' '.join(out)
    text = re.sub(r'__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:]+)\s+([^;]+);', static_shared, text)

    # kernel<<<cfg>>>(args); the kernel's address (for its cudaFuncSetAttribute limits) unless it is a
    # template whose arguments the call deduces (no address without them).
    templates = set(re.findall(r'template\s*<[^>]*>\s*__global__\s+(?:\w+\s+)*?void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(', text))
    def launch(m):
        kernel, cfg, args = m.group(1), m.group(2), m.group(3)
        addr = 'nullptr' if kernel in templates else '::emu::fn_addr(%s)' % kernel
        return '::emu::launch("%s", %s, [&] { %s(%s); }, %s);' % (kernel, addr, kernel, args, cfg)
    text, n = re.subn(r'([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.+?)>>>\s*\((.*?)\)\s*;', launch, text, flags=re.S)
    if '<<<' in text or '__shared__' in text:
        sys.exit('rewrite_cu.py: a launch or __shared__ declaration was not rewritten')
    return text


ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..'))


def emulated_sources():
    """Every source the emulation rewrites, relative to the repository root."""
    import glob
    found = []
    for pattern in ('src/backend/cuda/*.cu', 'src/backend/cuda/*.cuh', 'src/backend/cuda/*.cpp', 'src/parallel/*.cu'):
        found += sorted(os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, pattern)))
    return found


def affected(p):
    """The sources a plant's build must rewrite: its file, and every source that includes it (a .cuh)."""
    if not p['file'].endswith('.cuh'):
        return [p['file']]
    base = os.path.basename(p['file'])
    return [p['file']] + [s for s in emulated_sources()
                          if not s.endswith('.cuh') and base in open(os.path.join(ROOT, s)).read()]


def out_path(out_dir, src):
    """Where the rewritten src goes: a header under its include path (so that the rewritten sources' quoted
    includes find it first), a source as <stem>.cpp."""
    norm = src.replace(os.sep, '/')
    if norm.endswith('.cuh'):
        return os.path.join(out_dir, norm[norm.index('backend/'):] if 'backend/' in norm else os.path.basename(norm))
    return os.path.join(out_dir, os.path.splitext(os.path.basename(norm))[0] + '.cpp')


def main(argv):
    args = argv[1:]
    if args == ['--sources']:
        print('\n'.join(emulated_sources()))
        return
    if args == ['--list']:  # name|file|test|comma-separated sources its build rewrites
        for p in plant_table():
            print('%s|%s|%s|%s' % (p['name'], p['file'], p['test'], ','.join(affected(p))))
        return
    if args == ['--describe']:
        for p in plant_table():
            print('%-22s %-36s %-44s %s' % (p['name'], p['file'], p['test'] + ' ' + p['filter'], p['what']))
        return
    if args == ['--filter']:
        for p in plant_table():
            print('%s %s %s' % (p['name'], p['test'], p['filter']))
        return
    plant = None
    if '--plant' in args:
        i = args.index('--plant')
        plant = args[i + 1]
        del args[i:i + 2]
    if args[:1] != ['--out-dir'] or len(args) < 3:
        sys.exit(__doc__)
    out_dir, sources = args[1], args[2:]
    for src in sources:
        text = open(src).read()
        if plant:
            text = apply_plant(text, src, plant)
        text = '#line 1 "%s"\n' % os.path.abspath(src) + rewrite(text)
        out = out_path(out_dir, src)
        if os.path.exists(out) and open(out).read() == text:
            continue
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        open(out, 'w').write(text)


if __name__ == '__main__':
    main(sys.argv)
