; The streaming copy of scripts/gpu/engine_rules.py's bandwidth part (issue
; 22: how a bandwidth-bound kernel's speed depends on the SMs it runs on), and
; the compute loop its neighbours part runs beside it (issues 22 and 23: what
; a kernel on SMs of its own loses to another on the other SMs).
; stream.ptx beside it is generated from this file, and is what the GPU loads
; (cuModuleLoadData: no compiler on the device). Regenerate it with
;
;   python3 scripts/gpu/engine_rules.py --regenerate-ptx
;
; (LLVM's llc with the NVPTX back end, comments and blank lines dropped);
; test_gpu_scripts.py checks that the two agree where llc is installed.

target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.smid()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare float @llvm.fma.f32(float, float, float)

; Copies n 16-byte elements src -> dst, grid-stride, four loads in flight per
; thread before their stores; thread 0 of each block writes its %smid to
; smids[ctaid].
define void @stream(<4 x i32> addrspace(1)* %src, <4 x i32> addrspace(1)* %dst, i64 %n, i32 addrspace(1)* %smids) {
entry:
  %cta = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ncta = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %is0 = icmp eq i32 %tid, 0
  br i1 %is0, label %rec, label %start
rec:
  %sm = call i32 @llvm.nvvm.read.ptx.sreg.smid()
  %cta64 = zext i32 %cta to i64
  %slot = getelementptr i32, i32 addrspace(1)* %smids, i64 %cta64
  store i32 %sm, i32 addrspace(1)* %slot
  br label %start
start:
  %a = mul i32 %cta, %ntid
  %b = add i32 %a, %tid
  %i0 = zext i32 %b to i64
  %s32 = mul i32 %ncta, %ntid
  %stride = zext i32 %s32 to i64
  %s2 = shl i64 %stride, 1
  %s3 = mul i64 %stride, 3
  %s4 = shl i64 %stride, 2
  br label %main
main:
  %i = phi i64 [ %i0, %start ], [ %inext, %body ]
  %last = add i64 %i, %s3
  %ok = icmp ult i64 %last, %n
  br i1 %ok, label %body, label %tail
body:
  %j1 = add i64 %i, %stride
  %j2 = add i64 %i, %s2
  %p0 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %src, i64 %i
  %p1 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %src, i64 %j1
  %p2 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %src, i64 %j2
  %p3 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %src, i64 %last
  %v0 = load <4 x i32>, <4 x i32> addrspace(1)* %p0, align 16
  %v1 = load <4 x i32>, <4 x i32> addrspace(1)* %p1, align 16
  %v2 = load <4 x i32>, <4 x i32> addrspace(1)* %p2, align 16
  %v3 = load <4 x i32>, <4 x i32> addrspace(1)* %p3, align 16
  %q0 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %dst, i64 %i
  %q1 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %dst, i64 %j1
  %q2 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %dst, i64 %j2
  %q3 = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %dst, i64 %last
  store <4 x i32> %v0, <4 x i32> addrspace(1)* %q0, align 16
  store <4 x i32> %v1, <4 x i32> addrspace(1)* %q1, align 16
  store <4 x i32> %v2, <4 x i32> addrspace(1)* %q2, align 16
  store <4 x i32> %v3, <4 x i32> addrspace(1)* %q3, align 16
  %inext = add i64 %i, %s4
  br label %main
tail:
  %k = phi i64 [ %i, %main ], [ %knext, %tbody ]
  %tok = icmp ult i64 %k, %n
  br i1 %tok, label %tbody, label %exit
tbody:
  %pt = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %src, i64 %k
  %vt = load <4 x i32>, <4 x i32> addrspace(1)* %pt, align 16
  %qt = getelementptr <4 x i32>, <4 x i32> addrspace(1)* %dst, i64 %k
  store <4 x i32> %vt, <4 x i32> addrspace(1)* %qt, align 16
  %knext = add i64 %k, %stride
  br label %tail
exit:
  ret void
}

; Compute only: each thread runs four independent chains of `iters` fused
; multiply-adds (enough in flight to keep an SM's FP32 pipes busy, no memory
; traffic in the loop), then writes their sum to out[global thread]; thread 0
; of each block writes its %smid to smids[ctaid].
define void @burn(i64 %iters, float addrspace(1)* %out, i32 addrspace(1)* %smids) {
entry:
  %cta = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %is0 = icmp eq i32 %tid, 0
  br i1 %is0, label %rec, label %start
rec:
  %sm = call i32 @llvm.nvvm.read.ptx.sreg.smid()
  %cta64 = zext i32 %cta to i64
  %slot = getelementptr i32, i32 addrspace(1)* %smids, i64 %cta64
  store i32 %sm, i32 addrspace(1)* %slot
  br label %start
start:
  %x = uitofp i32 %tid to float
  %a0 = fadd float %x, 1.0
  %a1 = fadd float %x, 2.0
  %a2 = fadd float %x, 3.0
  %a3 = fadd float %x, 4.0
  br label %loop
loop:
  %i = phi i64 [ 0, %start ], [ %inext, %body ]
  %c0 = phi float [ %a0, %start ], [ %d0, %body ]
  %c1 = phi float [ %a1, %start ], [ %d1, %body ]
  %c2 = phi float [ %a2, %start ], [ %d2, %body ]
  %c3 = phi float [ %a3, %start ], [ %d3, %body ]
  %more = icmp ult i64 %i, %iters
  br i1 %more, label %body, label %done
body:
  %d0 = call float @llvm.fma.f32(float %c0, float 0x3FEFFFFFE0000000, float 0x3E7AD7F2A0000000)
  %d1 = call float @llvm.fma.f32(float %c1, float 0x3FEFFFFFE0000000, float 0x3E7AD7F2A0000000)
  %d2 = call float @llvm.fma.f32(float %c2, float 0x3FEFFFFFE0000000, float 0x3E7AD7F2A0000000)
  %d3 = call float @llvm.fma.f32(float %c3, float 0x3FEFFFFFE0000000, float 0x3E7AD7F2A0000000)
  %inext = add i64 %i, 1
  br label %loop
done:
  %s01 = fadd float %c0, %c1
  %s23 = fadd float %c2, %c3
  %sum = fadd float %s01, %s23
  %g0 = mul i32 %cta, %ntid
  %g = add i32 %g0, %tid
  %g64 = zext i32 %g to i64
  %dst = getelementptr float, float addrspace(1)* %out, i64 %g64
  store float %sum, float addrspace(1)* %dst
  ret void
}

!nvvm.annotations = !{!0, !1}
!0 = !{void (<4 x i32> addrspace(1)*, <4 x i32> addrspace(1)*, i64, i32 addrspace(1)*)* @stream, !"kernel", i32 1}
!1 = !{void (i64, float addrspace(1)*, i32 addrspace(1)*)* @burn, !"kernel", i32 1}
