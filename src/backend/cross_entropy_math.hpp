// Per-row math of the fused softmax cross-entropy (ops::cross_entropy), shared by the CPU backend
// (one thread walks a row) and a CUDA kernel (a block reduces a row with ce_combine).
//
// A row x[V] is summarised by (max, sum) with sum = sum_j exp(x_j - max), built online so a row is
// read once for the statistics: ce_push adds one element, ce_combine merges two partial summaries.
//   loss      = (max - x[target]) + log(sum)
//   d_logit_j = (exp(x_j - max) / sum - [j == target]) * grad_scale
#pragma once

#include <cmath>

#include "backend/math_fns.hpp"
#include "core/hd.hpp"

namespace sinklab::math {

template <class Acc>
struct SoftmaxStats {
  Acc max;  // running maximum (-inf when empty)
  Acc sum;  // sum of exp(x - max)
};

template <class Acc>
SL_HD SoftmaxStats<Acc> ce_empty() {
  return {-INFINITY, Acc(0)};
}

// Adds one logit to the running summary.
template <class Acc>
SL_HD void ce_push(SoftmaxStats<Acc>& s, Acc x) {
  if (x > s.max) {
    s.sum = s.sum * fexp(s.max - x) + Acc(1);  // exp(-inf) = 0 for the first element
    s.max = x;
  } else {
    s.sum += fexp(x - s.max);
  }
}

// Merges two partial summaries (tree reductions over a row).
template <class Acc>
SL_HD SoftmaxStats<Acc> ce_combine(SoftmaxStats<Acc> a, SoftmaxStats<Acc> b) {
  if (a.max < b.max) {
    SoftmaxStats<Acc> t = a;
    a = b;
    b = t;
  }
  if (b.max == -INFINITY) return a;  // b empty (also covers both empty)
  return {a.max, a.sum + b.sum * fexp(b.max - a.max)};
}

// -log softmax(x)[target] from the row summary. (max - x_target) first: with large logits the
// difference is exact, while log(sum) + max would round log(sum) away at the scale of max.
template <class Acc>
SL_HD Acc ce_loss(const SoftmaxStats<Acc>& s, Acc x_target) {
  using std::log;
  return (s.max - x_target) + log(s.sum);
}

// d loss / d x_j for one element, scaled.
template <class Acc>
SL_HD Acc ce_grad(const SoftmaxStats<Acc>& s, Acc x, bool is_target, Acc grad_scale) {
  Acc p = fexp(x - s.max) / s.sum;
  return (is_target ? p - Acc(1) : p) * grad_scale;
}

}  // namespace sinklab::math
