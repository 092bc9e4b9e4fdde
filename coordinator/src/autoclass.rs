//! `TANDEM_CLASS=auto` from the kernel stream: the rule that says a job trains.
//!
//! A job whose class comes from `[policy] auto_class = "detect"` starts as
//! inference (when it may claim inference at all) and becomes training, for
//! the rest of its life, at the first kernel whose name shows a backward pass
//! or an optimizer step: names containing (ASCII case-insensitive) one of
//! [`TRAINING_MARKERS`]. Forward-only jobs (serving, evaluation) never launch
//! such kernels. The name that decided is shown in the stats (`class_reason`).
//!
//! Why names: PyTorch's autograd kernels carry `backward` / `Backward` in their
//! mangled names (e.g. `native_layer_norm_backward`), cuDNN's and cuBLAS's
//! gradient kernels `dgrad` / `wgrad` / `bprop`, and optimizer steps
//! `multi_tensor_apply`, `_foreach_`, `adam`, `sgd`. A training job issues one
//! within its first step, so it runs at most one forward pass as inference.

/// Substrings of a kernel name that mean training (lower case).
pub const TRAINING_MARKERS: &[&str] = &[
    "backward",
    "autograd",
    "dgrad",
    "wgrad",
    "bprop",
    "multi_tensor_apply",
    "_foreach_",
    "adam",
    "sgd",
    "optimizer",
];

/// The marker `name` contains, if any.
#[must_use]
pub fn training_marker(name: &[u8]) -> Option<&'static str> {
    TRAINING_MARKERS.iter().copied().find(|m| {
        name.windows(m.len())
            .any(|w| w.eq_ignore_ascii_case(m.as_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_and_optimizer_kernels_mean_training() {
        for (name, marker) in [
            (
                &b"_ZN2at6native27native_layer_norm_backward_kernelIfEEvv"[..],
                "backward",
            ),
            (
                b"void at::native::(anonymous namespace)::CUDAFunctor_add<float>::BackwardCUDA",
                "backward",
            ),
            (b"sm90_xmma_dgrad_implicit_gemm_bf16", "dgrad"),
            (b"cudnn::bn_bw_1C11_kernel_new wgrad_alg0_engine", "wgrad"),
            (
                b"void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
                "multi_tensor_apply",
            ),
            (b"_foreach_add_cuda_kernel", "_foreach_"),
            (b"fused_ADAMW_step", "adam"),
        ] {
            assert_eq!(
                training_marker(name),
                Some(marker),
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn forward_kernels_do_not() {
        for name in [
            &b"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"[..],
            b"void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
            b"cudnn::winograd_nonfused::winogradForwardData4x4",
            b"_ZN2at6native18reduce_kernelILi512ELi1EEEvv",
            b"fmha_cutlassF_f16_aligned_64x64_rf_sm80",
            b"softmax_warp_forward",
            b"",
        ] {
            assert_eq!(
                training_marker(name),
                None,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }
}
