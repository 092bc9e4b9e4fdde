//! The artifact's convolutional trainers: ResNet50 and PointNet, batch 128,
//! one step each.

use super::builder::B;
use super::layers::{bn_bwd, bn_fwd, conv_bwd, conv_fwd, ConvShape};
use super::step::{fit_step, Step};
use crate::params::Params;
use crate::trace::{JobClass, Trace};

/// ResNet50 layers in forward order.
#[derive(Clone, Copy, Debug)]
enum RLayer {
    Conv(ConvShape),
    /// Batch norm over (channels, h*w).
    Bn(u64, u64),
    Relu(u64, u64),
    Add(u64, u64),
    MaxPool,
    AvgPool,
    Fc,
}

fn resnet50_layers() -> Vec<RLayer> {
    let conv = |cin, cout, k, stride, h| {
        RLayer::Conv(ConvShape {
            cin,
            cout,
            k,
            stride,
            h,
            w: h,
        })
    };
    let mut l = vec![
        conv(3, 64, 7, 2, 224),
        RLayer::Bn(64, 112 * 112),
        RLayer::Relu(64, 112 * 112),
        RLayer::MaxPool,
    ];
    let (mut cin, mut h) = (64, 56);
    for (mid, blocks, stride) in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)] {
        let out = mid * 4;
        for i in 0..blocks {
            let s = if i == 0 { stride } else { 1 };
            let ho = h / s;
            l.push(conv(cin, mid, 1, 1, h));
            l.push(RLayer::Bn(mid, h * h));
            l.push(RLayer::Relu(mid, h * h));
            l.push(conv(mid, mid, 3, s, h));
            l.push(RLayer::Bn(mid, ho * ho));
            l.push(RLayer::Relu(mid, ho * ho));
            l.push(conv(mid, out, 1, 1, ho));
            l.push(RLayer::Bn(out, ho * ho));
            if i == 0 {
                l.push(conv(cin, out, 1, s, h));
                l.push(RLayer::Bn(out, ho * ho));
            }
            l.push(RLayer::Add(out, ho * ho));
            l.push(RLayer::Relu(out, ho * ho));
            cin = out;
            h = ho;
        }
    }
    l.push(RLayer::AvgPool);
    l.push(RLayer::Fc);
    l
}

/// ResNet50, fp32, batch 128, plain SGD, no cuDNN.
#[must_use]
pub fn resnet50_b128(p: &Params) -> Trace {
    let n = 128u64;
    let mut b = B::new(p);
    let (f, w, o) = (p.train_fwd_ns, p.train_bwd_ns, p.train_opt_ns);
    let layers = resnet50_layers();
    for layer in &layers {
        match *layer {
            RLayer::Conv(c) => conv_fwd(&mut b, n, c, false),
            RLayer::Bn(ch, hw) => bn_fwd(&mut b, n, ch, hw),
            RLayer::Relu(ch, hw) => b.elt("relu", n * ch * hw, 8.0, f),
            RLayer::Add(ch, hw) => b.elt("add", n * ch * hw, 12.0, f),
            RLayer::MaxPool => b.elt(
                "max_pool2d_with_indices",
                n * 64 * 56 * 56,
                4.0 * 4.0 + 12.0,
                f,
            ),
            RLayer::AvgPool => b.rows("adaptive_avg_pool2d", n * 2048 / 32, 32 * 49, 4.0, f),
            RLayer::Fc => b.sgemm("addmm_fc", n, 1000, 2048, f),
        }
    }
    b.rows("log_softmax", n, 1000, 8.0, f);
    b.elt("nll_loss", n, 8.0, f);
    b.elt("ones_like", 1, 4.0, f);
    b.elt("nll_loss_backward", n * 1000, 4.0, w);
    b.rows("log_softmax_backward", n, 1000, 12.0, w);
    for (i, layer) in layers.iter().enumerate().rev() {
        match *layer {
            RLayer::Conv(c) => conv_bwd(&mut b, n, c, i > 0, false),
            RLayer::Bn(ch, hw) => bn_bwd(&mut b, n, ch, hw),
            RLayer::Relu(ch, hw) => b.elt("threshold_backward", n * ch * hw, 12.0, w),
            // The block input's gradient: main path plus shortcut.
            RLayer::Add(ch, hw) => b.elt("grad_accumulate", n * ch * hw, 12.0, w),
            RLayer::MaxPool => {
                b.elt("max_pool_grad_zero", n * 64 * 112 * 112, 4.0, w);
                b.elt(
                    "max_pool2d_with_indices_backward",
                    n * 64 * 56 * 56,
                    16.0,
                    w,
                );
            }
            RLayer::AvgPool => b.elt("adaptive_avg_pool2d_backward", n * 2048 * 49, 4.0, w),
            RLayer::Fc => {
                b.sgemm("fc_dgrad", n, 2048, 1000, w);
                b.sgemm("fc_wgrad", 1000, 2048, n, w);
                b.rows("fc_bias_grad", 1000 / 32, n * 32, 4.0, w);
            }
        }
    }
    // SGD without momentum: foreach add over 25.6 M parameters, 161 tensors.
    b.foreach("foreach_add_sgd", 25_557_032, 161, 2, 12.0, o);
    // TrainMonitor: torch.cuda.synchronize(), then `if loss:` reads it back.
    b.sync(f);
    b.copy(4, true, f);
    b.sync(f / 2);
    fit_step(&mut b, &Step { gpu_util: 0.99506 });
    b.trace(
        "resnet50_b128",
        JobClass::Training,
        "torchvision ResNet50, fp32, batch 128, plain SGD; PyTorch without cuDNN: every convolution is ATen's per-sample im2col + SGEMM loop (tally-bench train_resnet.py, Dockerfile.base USE_CUDNN=0); one step",
    )
}

/// PointNet classification with the feature transform, fp32, batch 128,
/// 2500 points, Adam.
#[must_use]
pub fn pointnet_b128(p: &Params) -> Trace {
    let (n, pts, classes) = (128u64, 2500u64, 16u64);
    let mut b = B::new(p);
    let (f, w, o) = (p.train_fwd_ns, p.train_bwd_ns, p.train_opt_ns);
    let c1 = |cin, cout| ConvShape {
        cin,
        cout,
        k: 1,
        stride: 1,
        h: 1,
        w: pts,
    };
    // (conv shape, grad wrt input needed) per conv1d, in forward order, and
    // the STN heads' FC output widths.
    let stn3 = [c1(3, 64), c1(64, 128), c1(128, 1024)];
    let stnk = [c1(64, 64), c1(64, 128), c1(128, 1024)];
    let trunk = [c1(64, 128), c1(128, 1024)];
    b.copy(n * pts * 3 * 4, false, f);
    b.copy(n * 8, false, f);
    b.elt("transpose_contiguous", n * pts * 3, 8.0, f);
    let stn_fwd = |b: &mut B<'_>, convs: &[ConvShape; 3], out: u64| {
        for c in convs {
            conv_fwd(b, n, *c, true);
            bn_fwd(b, n, c.cout, pts);
            b.elt("relu", n * c.cout * pts, 8.0, f);
        }
        b.rows("max_over_points", n * 1024, pts, 4.0, f);
        for (i, o_) in [(1024u64, 512u64), (512, 256), (256, out)] {
            b.sgemm("addmm_fc", n, o_, i, f);
            if o_ != out {
                bn_fwd(b, n, o_, 1);
                b.elt("relu", n * o_, 8.0, f);
            }
        }
        b.copy(out * 4, false, f);
        b.elt("repeat_identity", n * out, 8.0, f);
        b.elt("add_identity", n * out, 12.0, f);
    };
    stn_fwd(&mut b, &stn3, 9);
    b.sgemm("bmm_transform", n * pts, 3, 3, f);
    b.elt("contiguous", n * pts * 3, 8.0, f);
    let conv1 = c1(3, 64);
    conv_fwd(&mut b, n, conv1, true);
    bn_fwd(&mut b, n, 64, pts);
    b.elt("relu", n * 64 * pts, 8.0, f);
    stn_fwd(&mut b, &stnk, 64 * 64);
    b.sgemm("bmm_feature_transform", n * pts, 64, 64, f);
    b.elt("contiguous", n * pts * 64, 8.0, f);
    for (i, c) in trunk.iter().enumerate() {
        conv_fwd(&mut b, n, *c, true);
        bn_fwd(&mut b, n, c.cout, pts);
        if i == 0 {
            b.elt("relu", n * c.cout * pts, 8.0, f);
        }
    }
    b.rows("max_over_points", n * 1024, pts, 4.0, f);
    for (i, o_) in [(1024u64, 512u64), (512, 256), (256, classes)] {
        b.sgemm("addmm_fc", n, o_, i, f);
        if o_ != classes {
            if o_ == 256 {
                b.elt("dropout", n * o_, 9.0, f);
            }
            bn_fwd(&mut b, n, o_, 1);
            b.elt("relu", n * o_, 8.0, f);
        }
    }
    b.rows("log_softmax", n, classes, 8.0, f);
    b.rows("log_softmax", n, classes, 8.0, f);
    b.elt("nll_loss", n, 8.0, f);
    // feature_transform_regularizer: eye to the GPU, bmm, sub, norm, mean, scale, add.
    b.copy(64 * 64 * 4, false, f);
    b.sgemm("bmm_reg", n * 64, 64, 64, f);
    for name in ["sub_eye", "norm", "mean", "mul", "add_loss"] {
        b.elt(name, n * 64 * 64, 8.0, f);
    }
    // Backward (reverse order), the regularizer's and the loss's first.
    for name in ["ones_like", "mul_bwd", "mean_bwd", "norm_bwd", "sub_bwd"] {
        b.elt(name, n * 64 * 64, 8.0, w);
    }
    b.sgemm("bmm_reg_bwd", n * 64, 64, 64, w);
    b.sgemm("bmm_reg_bwd", n * 64, 64, 64, w);
    b.elt("nll_loss_backward", n * classes, 8.0, w);
    b.rows("log_softmax_backward", n, classes, 12.0, w);
    b.rows("log_softmax_backward", n, classes, 12.0, w);
    let fc_bwd = |b: &mut B<'_>, heads: &[(u64, u64)]| {
        for &(i, o_) in heads.iter().rev() {
            b.elt("relu_bn_backward", n * o_, 12.0, w);
            b.sgemm("fc_dgrad", n, i, o_, w);
            b.sgemm("fc_wgrad", o_, i, n, w);
            b.rows("fc_bias_grad", o_.div_ceil(32), n * 32, 4.0, w);
        }
    };
    fc_bwd(&mut b, &[(1024, 512), (512, 256), (256, classes)]);
    b.elt("max_over_points_backward", n * 1024 * pts, 8.0, w);
    for (i, c) in trunk.iter().enumerate().rev() {
        if i == 0 {
            b.elt("threshold_backward", n * c.cout * pts, 12.0, w);
        }
        bn_bwd(&mut b, n, c.cout, pts);
        conv_bwd(&mut b, n, *c, true, true);
    }
    b.sgemm("bmm_feature_transform_dgrad", n * pts, 64, 64, w);
    b.sgemm("bmm_feature_transform_wgrad", n * 64, 64, pts, w);
    let stn_bwd = |b: &mut B<'_>, convs: &[ConvShape; 3], out: u64, input_grad: bool| {
        fc_bwd(b, &[(1024, 512), (512, 256), (256, out)]);
        b.elt("max_over_points_backward", n * 1024 * pts, 8.0, w);
        for (i, c) in convs.iter().enumerate().rev() {
            b.elt("threshold_backward", n * c.cout * pts, 12.0, w);
            bn_bwd(b, n, c.cout, pts);
            conv_bwd(b, n, *c, i > 0 || input_grad, true);
        }
    };
    stn_bwd(&mut b, &stnk, 64 * 64, true);
    b.elt("grad_accumulate", n * 64 * pts, 12.0, w);
    b.elt("threshold_backward", n * 64 * pts, 12.0, w);
    bn_bwd(&mut b, n, 64, pts);
    conv_bwd(&mut b, n, conv1, true, true);
    b.sgemm("bmm_transform_wgrad", n * 3, 3, pts, w);
    stn_bwd(&mut b, &stn3, 9, false);
    // Adam (foreach) over 3.5 M parameters in 58 tensors.
    for (name, lists, bytes) in [
        ("foreach_lerp", 2usize, 12.0),
        ("foreach_mul", 1, 8.0),
        ("foreach_addcmul", 2, 16.0),
        ("foreach_sqrt", 2, 8.0),
        ("foreach_div", 1, 8.0),
        ("foreach_add_eps", 1, 8.0),
        ("foreach_addcdiv", 3, 16.0),
    ] {
        b.foreach(name, 3_463_763, 58, lists, bytes, o);
    }
    b.sync(f);
    b.copy(4, true, f);
    b.sync(f / 2);
    fit_step(&mut b, &Step { gpu_util: 0.9323 });
    b.trace(
        "pointnet_b128",
        JobClass::Training,
        "PointNet classification with feature transform, fp32, batch 128 x 2500 points, 16 classes, Adam; conv1d through ATen's per-sample SGEMM loop (no cuDNN) (tally-bench train_pointnet.py); one step; data-loader stall fitted to 93% GPU utilisation",
    )
}
