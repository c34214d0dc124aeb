//! Arithmetic peaks of this machine: fused multiply-adds per second for each
//! vector width the engine can use (AVX-512 included: the engine's kernels
//! use it where the CPU has it), on 1 to n threads, the latency of one FMA,
//! and the int8 multiply-accumulate rate of each of the engine's int8 steps
//! (AVX2 `vpmaddubsw`, and AVX-512 VNNI `vpdpbusd` where present).
//!
//! Each kernel keeps ten independent accumulators, more than FMA latency x
//! FMA pipes on any current core, so it is bound by issue rate, not by the
//! dependency chain; the latency kernel is one chain. The best of several
//! repeats is the peak (a peak is what the machine can do; interference
//! only ever lowers it).

use std::hint::black_box;
use std::time::Instant;

/// An instruction set's FMA kernel: multiply-accumulates per call of
/// `iterations` iterations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// One lane: `vfmadd231ss`.
    Scalar,
    /// Four lanes: SSE-width `vfmadd231ps`.
    Sse,
    /// Eight lanes: AVX2 `vfmadd231ps` on 256-bit registers.
    Avx2,
    /// Sixteen lanes: AVX-512 `vfmadd231ps` on 512-bit registers.
    Avx512,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Sse => "sse-fma",
            Isa::Avx2 => "avx2-fma",
            Isa::Avx512 => "avx512-fma",
        }
    }

    pub fn lanes(self) -> usize {
        match self {
            Isa::Scalar => 1,
            Isa::Sse => 4,
            Isa::Avx2 => 8,
            Isa::Avx512 => 16,
        }
    }

    /// The instruction sets this machine runs, widest last.
    pub fn available() -> Vec<Isa> {
        let mut isas = vec![Isa::Scalar];
        if fma_available() {
            isas.extend([Isa::Sse, Isa::Avx2]);
        }
        if avx512_available() {
            isas.push(Isa::Avx512);
        }
        isas
    }
}

const ACCUMULATORS: u64 = 10;

/// Runs `iterations` of the kernel; returns its multiply-accumulates.
fn fma_kernel(isa: Isa, iterations: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if fma_available() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time).
        unsafe {
            match isa {
                Isa::Scalar => x86::scalar(iterations),
                Isa::Sse => x86::sse(iterations),
                Isa::Avx2 => x86::avx2(iterations),
                // SAFETY: listed by `available` only with AVX-512F.
                Isa::Avx512 => x86::avx512(iterations),
            }
        }
        return iterations * ACCUMULATORS * isa.lanes() as u64;
    }
    portable_chains(iterations, ACCUMULATORS as usize);
    iterations * ACCUMULATORS
}

/// Independent scalar chains with `f32::mul_add` (what a machine without
/// the x86 kernels gets).
fn portable_chains(iterations: u64, chains: usize) -> f32 {
    let mut acc = vec![0.0f32; chains];
    let (a, b) = (black_box(0.999_f32), black_box(1e-7_f32));
    for _ in 0..iterations {
        for x in acc.iter_mut() {
            *x = x.mul_add(a, b);
        }
    }
    black_box(acc.iter().sum())
}

fn avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512_available()
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn fma_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    macro_rules! chains {
        ($zero:expr, $fma:ident, $sum:expr, $iterations:expr, $a:expr, $b:expr) => {{
            let mut acc = [$zero; 10];
            for _ in 0..$iterations {
                for x in acc.iter_mut() {
                    *x = $fma(*x, $a, $b);
                }
            }
            black_box(acc.iter().fold($zero, |s, x| $sum(s, *x)));
        }};
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scalar(iterations: u64) {
        let (a, b) = (_mm_set_ss(black_box(0.999)), _mm_set_ss(black_box(1e-7)));
        chains!(_mm_setzero_ps(), _mm_fmadd_ss, _mm_add_ss, iterations, a, b);
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn sse(iterations: u64) {
        let (a, b) = (_mm_set1_ps(black_box(0.999)), _mm_set1_ps(black_box(1e-7)));
        chains!(_mm_setzero_ps(), _mm_fmadd_ps, _mm_add_ps, iterations, a, b);
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2(iterations: u64) {
        let (a, b) = (
            _mm256_set1_ps(black_box(0.999)),
            _mm256_set1_ps(black_box(1e-7)),
        );
        chains!(
            _mm256_setzero_ps(),
            _mm256_fmadd_ps,
            _mm256_add_ps,
            iterations,
            a,
            b
        );
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512(iterations: u64) {
        let (a, b) = (
            _mm512_set1_ps(black_box(0.999)),
            _mm512_set1_ps(black_box(1e-7)),
        );
        chains!(
            _mm512_setzero_ps(),
            _mm512_fmadd_ps,
            _mm512_add_ps,
            iterations,
            a,
            b
        );
    }

    /// One dependent chain of scalar FMAs.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn chain(iterations: u64) {
        let (a, b) = (_mm_set_ss(black_box(0.999)), _mm_set_ss(black_box(1e-7)));
        let mut x = _mm_setzero_ps();
        for _ in 0..iterations {
            x = _mm_fmadd_ss(x, a, b);
        }
        black_box(x);
    }

    /// The engine's int8 inner step: `vpmaddubsw` (u8 x i8 pairs to i16)
    /// then `vpmaddwd` by ones and `vpaddd` into i32, 32 MACs per step.
    /// Two activation vectors are loaded per iteration from a moving
    /// offset (so nothing is loop-invariant) and multiplied by four weight
    /// vectors into eight independent accumulators.
    #[target_feature(enable = "avx2")]
    pub unsafe fn int8(iterations: u64) {
        let data: Vec<i8> = (0..512).map(|i| black_box((i % 7) as i8)).collect();
        let b = [3, -2, 5, -7].map(|v| _mm256_set1_epi8(black_box(v)));
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); 8];
        for it in 0..iterations {
            let base = (it as usize & 7) * 32;
            // SAFETY: base + 64 <= 288 < 512 bytes of `data`.
            let a = unsafe {
                [
                    _mm256_loadu_si256(data.as_ptr().add(base) as *const __m256i),
                    _mm256_loadu_si256(data.as_ptr().add(base + 256) as *const __m256i),
                ]
            };
            for (k, x) in acc.iter_mut().enumerate() {
                let pairs = _mm256_maddubs_epi16(a[k % 2], b[k / 2]);
                *x = _mm256_add_epi32(*x, _mm256_madd_epi16(pairs, ones));
            }
        }
        black_box(acc);
    }

    /// The engine's AVX-512 VNNI int8 step: `vpdpbusd` (u8 x i8 quads
    /// summed into i32), 64 MACs per instruction, with the same loads and
    /// eight independent accumulators as [`int8`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn vnni(iterations: u64) {
        let data: Vec<i8> = (0..1024).map(|i| black_box((i % 7) as i8)).collect();
        let b = [3, -2, 5, -7].map(|v| _mm512_set1_epi8(black_box(v)));
        let mut acc = [_mm512_setzero_si512(); 8];
        for it in 0..iterations {
            let base = (it as usize & 7) * 64;
            // SAFETY: base + 512 + 64 <= 1024 bytes of `data`.
            let a = unsafe {
                [
                    _mm512_loadu_si512(data.as_ptr().add(base) as *const _),
                    _mm512_loadu_si512(data.as_ptr().add(base + 512) as *const _),
                ]
            };
            for (k, x) in acc.iter_mut().enumerate() {
                *x = _mm512_dpbusd_epi32(*x, a[k % 2], b[k / 2]);
            }
        }
        black_box(acc);
    }
}

/// Multiply-accumulates per second of `kernel` run on `threads` threads at
/// once, best of `repeats`; each call lasts about `seconds`.
fn rate(threads: usize, seconds: f64, repeats: usize, kernel: &(dyn Fn(u64) -> u64 + Sync)) -> f64 {
    // Size the iterations on one thread.
    let mut iterations = 1_000u64;
    loop {
        let t = Instant::now();
        kernel(iterations);
        let elapsed = t.elapsed().as_secs_f64();
        if elapsed > seconds / 10.0 || iterations > 1 << 40 {
            iterations = ((iterations as f64) * seconds / elapsed.max(1e-9)) as u64;
            break;
        }
        iterations *= 4;
    }
    let iterations = iterations.max(1);
    (0..repeats)
        .map(|_| {
            let t = Instant::now();
            let macs: u64 = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| s.spawn(|| kernel(iterations)))
                    .collect();
                handles.into_iter().map(|h| h.join().expect("kernel")).sum()
            });
            macs as f64 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// The fp32 FMA rate of `isa` on `threads` threads, MACs per second.
pub fn fma_rate(isa: Isa, threads: usize) -> f64 {
    rate(threads, 0.05, 5, &|n| fma_kernel(isa, n))
}

/// The engine's int8 steps this machine runs: the AVX2 one everywhere
/// (the portable fallback without AVX2), and AVX-512 VNNI where present.
pub fn int8_steps() -> Vec<&'static str> {
    let mut steps = vec!["avx2-vpmaddubsw"];
    if vnni_available() {
        steps.push("avx512-vnni");
    }
    steps
}

/// The int8 multiply-accumulate rate of `step` (one of [`int8_steps`]) on
/// `threads` threads.
pub fn int8_step_rate(step: &str, threads: usize) -> f64 {
    if step == "avx512-vnni" {
        #[cfg(target_arch = "x86_64")]
        return rate(threads, 0.05, 5, &|n| {
            // SAFETY: listed by `int8_steps` only with AVX-512 VNNI.
            unsafe { x86::vnni(n) };
            n * 8 * 64
        });
    }
    int8_rate(threads)
}

/// The int8 multiply-accumulate rate of the engine's AVX2 step on
/// `threads` threads (the portable fallback on other machines).
fn int8_rate(threads: usize) -> f64 {
    rate(threads, 0.05, 5, &|n| {
        #[cfg(target_arch = "x86_64")]
        if fma_available() {
            // SAFETY: AVX2 is available (checked at run time).
            unsafe { x86::int8(n) };
            return n * 8 * 32;
        }
        portable_chains(n, ACCUMULATORS as usize);
        n * ACCUMULATORS
    })
}

/// Nanoseconds from one FMA to the FMA that depends on it.
pub fn fma_latency_ns() -> f64 {
    let chain = |n: u64| {
        #[cfg(target_arch = "x86_64")]
        if fma_available() {
            // SAFETY: FMA is available (checked at run time).
            unsafe { x86::chain(n) };
            return n;
        }
        portable_chains(n, 1);
        n
    };
    1e9 / rate(1, 0.05, 5, &chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wider_vectors_and_more_threads_do_more_work() {
        let isas = Isa::available();
        let widest = *isas.last().unwrap();
        let one = fma_rate(widest, 1);
        assert!(one > 1e8, "an FMA peak of {one} MAC/s is not plausible");
        if widest != Isa::Scalar {
            // Eight lanes at least double the scalar rate on any x86 core.
            assert!(one > 2.0 * fma_rate(Isa::Scalar, 1));
        }
        let latency = fma_latency_ns();
        assert!((0.05..50.0).contains(&latency), "{latency} ns");
        for step in int8_steps() {
            assert!(int8_step_rate(step, 1) > 1e8, "{step}");
        }
    }
}
