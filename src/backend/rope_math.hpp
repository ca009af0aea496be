// Per-element rotary position embedding math, shared by the CPU backend and the CUDA kernels.
//
// Layout: "rotate half" (HF Llama / GPT-NeoX). Within the first rotary_dim features of a head, feature
// i < half = rotary_dim/2 pairs with feature i + half, and both rotate by the angle pos * inv_freq[i]:
//   out[i]        = x[i] cos - x[i+half] sin
//   out[i + half] = x[i+half] cos + x[i] sin
// (HF: q * cos + rotate_half(q) * sin with cos/sin = cat(freqs, freqs), rotate_half(x) = cat(-x2, x1)).
// Features >= rotary_dim pass through unchanged (partial rotary, e.g. GPT-NeoX rotary_pct).
//
// Angles are computed in double: pos * inv_freq reaches 1e5 rad for long contexts, where a float angle
// has lost all its fractional digits.
#pragma once

#include <cmath>

#include "backend/ops.hpp"
#include "core/hd.hpp"

namespace sinklab::math {

// Inverse frequency of pair i (0 <= i < rotary_dim/2): base^(-2i/rotary_dim), then the Llama-3.1
// rescaling when cfg.llama3_factor > 0. The scaling is the formula of HF transformers'
// `_compute_llama3_parameters` (src/transformers/modeling_rope_utils.py, ROPE_INIT_FUNCTIONS["llama3"]),
// itself from Meta's llama-models `apply_scaling`:
//   wavelen = 2 pi / f;  low_wl = orig_max_pos / low_freq_factor;  high_wl = orig_max_pos / high_freq_factor
//   wavelen < high_wl            -> f            (high frequencies: unchanged)
//   wavelen > low_wl             -> f / factor   (low frequencies: interpolated by `factor`)
//   otherwise (medium)           -> (1 - s) f / factor + s f,  s = (orig_max_pos / wavelen - low_freq_factor)
//                                                                 / (high_freq_factor - low_freq_factor)
// HF evaluates this in float32; here it is double (the golden test checks both agree to f32 precision).
SL_HD double rope_inv_freq(int i, const ops::RopeConfig& cfg) {
  const double pi = 3.14159265358979323846;
  double f = 1.0 / pow(cfg.base, double(2 * i) / double(cfg.rotary_dim));
  if (cfg.llama3_factor > 0.0) {
    const double factor = cfg.llama3_factor;
    const double old_ctx = cfg.llama3_original_max_position;
    const double low_wl = old_ctx / cfg.llama3_low_freq_factor;
    const double high_wl = old_ctx / cfg.llama3_high_freq_factor;
    const double wavelen = 2.0 * pi / f;
    if (wavelen > low_wl) {
      f = f / factor;
    } else if (!(wavelen < high_wl)) {
      const double s = (old_ctx / wavelen - cfg.llama3_low_freq_factor) /
                       (cfg.llama3_high_freq_factor - cfg.llama3_low_freq_factor);
      f = (1.0 - s) * f / factor + s * f;
    }
  }
  return f;
}

// cos and sin of the angle position * inv_freq of one (position, pair), the angle in double, rounded to
// F once (the tables both backends build).
template <class F> SL_HD void rope_cos_sin(double position, double inv_freq, F& c, F& s) {
  const double angle = position * inv_freq;
  c = F(cos(angle));
  s = F(sin(angle));
}

// The rotation of one pair (a = x[i], b = x[i+half]) by the angle whose cosine/sine are c, s.
// Forward uses (c, s); backward (the transpose of an orthogonal rotation) uses (c, -s).
template <class T> SL_HD void rope_rotate(T& a, T& b, T c, T s) {
  const T a2 = a * c - b * s;
  const T b2 = b * c + a * s;
  a = a2;
  b = b2;
}

}  // namespace sinklab::math
