// Elementwise CUDA ops over the shared per-element math (activation_math.hpp, adamw_math.hpp): the same
// functions the CPU backend runs, instantiated for float.
#include <cmath>

#include "backend/activation_math.hpp"
#include "backend/adamw_math.hpp"
#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda {

namespace {

__global__ void activation_forward_kernel(float* out, TensorRows ro, const float* in, TensorRows ri, Activation act) {
  SL_GRID_LOOP(i, ro.numel) out[ro.offset(i)] = math::activate(act, in[ri.offset(i)]);
}

__global__ void activation_backward_kernel(float* d_in, TensorRows rdi, const float* d_out, TensorRows rdo,
                                           const float* in, TensorRows ri, Activation act) {
  SL_GRID_LOOP(i, rdi.numel) d_in[rdi.offset(i)] = d_out[rdo.offset(i)] * math::activate_grad(act, in[ri.offset(i)]);
}

__global__ void gated_forward_kernel(float* out, TensorRows ro, const float* gate, TensorRows rg, const float* up,
                                     TensorRows ru, Activation act) {
  SL_GRID_LOOP(i, ro.numel) out[ro.offset(i)] = math::activate(act, gate[rg.offset(i)]) * up[ru.offset(i)];
}

// d_gate = d_out * up * act'(gate);  d_up = d_out * act(gate). Either output may be absent (nullptr).
__global__ void gated_backward_kernel(float* d_gate, TensorRows rdg, float* d_up, TensorRows rdu, const float* d_out,
                                      TensorRows rdo, const float* gate, TensorRows rg, const float* up, TensorRows ru,
                                      Activation act, int64_t n) {
  SL_GRID_LOOP(i, n) {
    float g = gate[rg.offset(i)];
    float dy = d_out[rdo.offset(i)];
    float u = up[ru.offset(i)];
    if (d_gate) d_gate[rdg.offset(i)] = dy * u * math::activate_grad(act, g);
    if (d_up) d_up[rdu.offset(i)] = dy * math::activate(act, g);
  }
}

__global__ void adamw_kernel(float* param, TensorRows rp, const float* grad, TensorRows rg, float* m, TensorRows rm,
                             float* v, TensorRows rv, math::AdamWConstants c, float grad_scale) {
  SL_GRID_LOOP(i, rp.numel) {
    float p = param[rp.offset(i)];
    float mi = m[rm.offset(i)];
    float vi = v[rv.offset(i)];
    const float g = grad[rg.offset(i)];
    math::adamw_element(p, grad_scale == 1.0f ? g : g * grad_scale, mi, vi, c);
    param[rp.offset(i)] = p;
    m[rm.offset(i)] = mi;
    v[rv.offset(i)] = vi;
  }
}

}  // namespace

void CudaBackend::activation_forward(Tensor out, Tensor in, Activation act) {
  const char* op = "activation_forward";
  check_same_shape(out, in, op, "out", "in");
  check_device_f32(*this, out, op, "out");
  check_device_f32(*this, in, op, "in");
  TensorRows ro = rows_of(out, op, "out"), ri = rows_of(in, op, "in");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  activation_forward_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.ptr<float>(), ro, in.ptr<float>(), ri, act);
  CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act) {
  const char* op = "activation_backward";
  check_same_shape(d_in, in, op, "d_in", "in");
  check_same_shape(d_out, in, op, "d_out", "in");
  check_device_f32(*this, d_in, op, "d_in");
  check_device_f32(*this, d_out, op, "d_out");
  check_device_f32(*this, in, op, "in");
  TensorRows rdi = rows_of(d_in, op, "d_in"), rdo = rows_of(d_out, op, "d_out"), ri = rows_of(in, op, "in");
  if (rdi.numel == 0) return;
  DeviceGuard guard(index_);
  activation_backward_kernel<<<grid_for(rdi.numel), kThreads, 0, stream_>>>(d_in.ptr<float>(), rdi, d_out.ptr<float>(),
                                                                            rdo, in.ptr<float>(), ri, act);
  CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::gated_forward(Tensor out, Tensor gate, Tensor up, Activation act) {
  const char* op = "gated_forward";
  check_same_shape(out, gate, op, "out", "gate");
  check_same_shape(up, gate, op, "up", "gate");
  check_device_f32(*this, out, op, "out");
  check_device_f32(*this, gate, op, "gate");
  check_device_f32(*this, up, op, "up");
  TensorRows ro = rows_of(out, op, "out"), rg = rows_of(gate, op, "gate"), ru = rows_of(up, op, "up");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  gated_forward_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.ptr<float>(), ro, gate.ptr<float>(), rg,
                                                                     up.ptr<float>(), ru, act);
  CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act) {
  const char* op = "gated_backward";
  check_same_shape(d_out, gate, op, "d_out", "gate");
  check_same_shape(up, gate, op, "up", "gate");
  check_device_f32(*this, d_out, op, "d_out");
  check_device_f32(*this, gate, op, "gate");
  check_device_f32(*this, up, op, "up");
  TensorRows rdg, rdu;
  if (d_gate.defined()) {
    check_same_shape(d_gate, gate, op, "d_gate", "gate");
    check_device_f32(*this, d_gate, op, "d_gate");
    rdg = rows_of(d_gate, op, "d_gate");
  }
  if (d_up.defined()) {
    check_same_shape(d_up, gate, op, "d_up", "gate");
    check_device_f32(*this, d_up, op, "d_up");
    rdu = rows_of(d_up, op, "d_up");
  }
  TensorRows rdo = rows_of(d_out, op, "d_out"), rg = rows_of(gate, op, "gate"), ru = rows_of(up, op, "up");
  const int64_t n = rg.numel;
  if (n == 0 || (!d_gate.defined() && !d_up.defined())) return;
  DeviceGuard guard(index_);
  gated_backward_kernel<<<grid_for(n), kThreads, 0, stream_>>>(d_gate.ptr<float>(), rdg, d_up.ptr<float>(), rdu,
                                                               d_out.ptr<float>(), rdo, gate.ptr<float>(), rg,
                                                               up.ptr<float>(), ru, act, n);
  CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) {
  const char* op = "adamw_update";
  check_same_shape(grad, param, op, "grad", "param");
  check_same_shape(m, param, op, "m", "param");
  check_same_shape(v, param, op, "v", "param");
  check_device_f32(*this, param, op, "param");
  check_device_f32(*this, grad, op, "grad");
  check_device_f32(*this, m, op, "m");
  check_device_f32(*this, v, op, "v");
  SL_CHECK(s.step >= 1, "%s: step must be >= 1 (got %lld)", op, (long long)s.step);
  TensorRows rp = rows_of(param, op, "param"), rg = rows_of(grad, op, "grad"), rm = rows_of(m, op, "m"),
          rv = rows_of(v, op, "v");
  if (rp.numel == 0) return;
  // Step-level constants, once per call on the host, as the CPU forms them (adamw_math.hpp).
  const math::AdamWConstants c = math::adamw_constants(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step);
  DeviceGuard guard(index_);
  adamw_kernel<<<grid_for(rp.numel), kThreads, 0, stream_>>>(param.ptr<float>(), rp, grad.ptr<float>(), rg,
                                                             m.ptr<float>(), rm, v.ptr<float>(), rv, c,
                                                             float(s.grad_scale));
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace sinklab::cuda
