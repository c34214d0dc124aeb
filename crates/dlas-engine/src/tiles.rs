//! The register tiles of the GEMM microkernel: one list, read by the
//! microkernel dispatch (which instantiates a kernel per tile), by schedule
//! validation and by the tuner's search space, so the three cannot drift.

use crate::isa::Isa;

/// Calls macro `$then` with every register tile (rows, columns) the GEMM
/// microkernel is compiled for, as `$then!((6, 16), (4, 24), ...)`. Tiles
/// with a multiple of 16 columns run on AVX-512 where the CPU has it; the
/// last four need its 32 registers, so schedule validation rejects them on
/// a CPU with AVX2 only. The kernels are const-generic over the tile, which
/// is why the list is a macro: each entry must be a literal.
macro_rules! with_gemm_tiles {
    ($then:ident) => {
        $then!(
            (6, 16),
            (4, 24),
            (8, 8),
            (4, 16),
            (4, 8),
            (12, 32),
            (6, 64),
            (8, 48),
            (8, 16)
        )
    };
}
pub(crate) use with_gemm_tiles;

macro_rules! tile_list {
    ($(($m:literal, $n:literal)),*) => {
        &[$(($m, $n)),*]
    };
}

/// Register tiles the GEMM microkernel is compiled for (rows, columns), in
/// the order of [`with_gemm_tiles`].
pub const GEMM_TILES: &[(usize, usize)] = with_gemm_tiles!(tile_list);

/// The instruction set an `nr`-wide tile runs with on `isa`.
pub(crate) fn tile_isa(nr: usize, isa: Isa) -> Isa {
    match isa {
        Isa::Avx512 if nr.is_multiple_of(16) => Isa::Avx512,
        Isa::Avx512 | Isa::Avx2 => Isa::Avx2,
        Isa::Portable => Isa::Portable,
    }
}

/// Vector registers an `mr` x `nr` GEMM tile needs (accumulators, one row
/// of B, one broadcast of A) and has, with the kernels of `isa`.
pub(crate) fn tile_registers(mr: usize, nr: usize, isa: Isa) -> (usize, usize) {
    let isa = tile_isa(nr, isa);
    let vectors = nr.div_ceil(isa.lanes());
    (mr * vectors + vectors + 1, isa.registers())
}
