//! The vector instruction set a kernel is compiled for, detected at run
//! time, and the scalar helper the portable paths share.
//!
//! Every vectorised kernel exists in an AVX2 + FMA version (8 f32 lanes, 16
//! registers) and, where the wider registers pay, an AVX-512 version (16
//! lanes, 32 registers); a portable version runs everywhere else. Kernels
//! are picked per layer at load from [`Isa::detect`], and tests run every
//! level the CPU has, so the narrower fallbacks stay checked on a machine
//! that would never choose them.

/// An instruction-set level; later variants imply the earlier ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Isa {
    Portable,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512 Foundation (with AVX2 and FMA).
    Avx512,
}

impl Isa {
    /// The widest level this CPU runs (`std` caches the CPUID queries).
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
            if avx2 && is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// f32 lanes of one vector register (the portable code is written for
    /// the compiler to vectorise at SSE width, but its tiles are AVX2's).
    pub fn lanes(self) -> usize {
        match self {
            Isa::Avx512 => 16,
            Isa::Avx2 | Isa::Portable => 8,
        }
    }

    /// Architectural vector registers.
    pub fn registers(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 | Isa::Portable => 16,
        }
    }

    /// Every level this CPU can run, narrowest first (for tests).
    #[cfg(test)]
    pub fn available() -> impl Iterator<Item = Isa> {
        [Isa::Portable, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| i <= Isa::detect())
    }
}

/// Whether the AVX2 + FMA code paths can run on this CPU.
#[inline]
pub(crate) fn has_avx2_fma() -> bool {
    Isa::detect() >= Isa::Avx2
}

/// `a * b + c`, fused when the caller was compiled with FMA (a libm call
/// otherwise, which the portable paths avoid).
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}
