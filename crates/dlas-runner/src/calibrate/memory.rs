//! Sustained bandwidth of each cache level and of DRAM: a STREAM triad
//! (`a[i] = b[i] + s * c[i]`) on working sets sized from the caches the
//! kernel reports, run on every thread of the protocol.
//!
//! Bytes are counted as STREAM counts them (two reads and a write per
//! element; the write-allocate read is not counted), and the best of the
//! repeats is kept, as STREAM does.

use dlas_core::calibration::{Bandwidth, Cache};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

/// The data and unified caches the kernel lists, by level.
pub fn caches() -> Vec<Cache> {
    let root = Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut caches = Vec::new();
    for i in 0..8 {
        let dir = root.join(format!("index{i}"));
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let size = size.trim();
        let kib = match size.strip_suffix('K') {
            Some(k) => k.parse().ok(),
            None => size
                .strip_suffix('M')
                .and_then(|m| m.parse::<usize>().ok())
                .map(|m| m * 1024),
        };
        let shared_by = read("shared_cpu_list")
            .map(|l| cpu_count(l.trim()))
            .unwrap_or(1);
        if let (Ok(level), Some(kib)) = (level.trim().parse(), kib) {
            caches.push(Cache {
                level,
                kib,
                shared_by,
            });
        }
    }
    caches.sort_by_key(|c| c.level);
    caches
}

/// CPUs in a list such as `0-3,8`.
fn cpu_count(list: &str) -> usize {
    list.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0),
            None => 1,
        })
        .sum::<usize>()
        .max(1)
}

/// The triad on `bytes` of arrays per thread, on `threads` threads.
fn triad(bytes_per_thread: usize, threads: usize) -> f64 {
    let n = (bytes_per_thread / 12).max(64);
    let mut arrays: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..threads)
        .map(|_| (vec![0.0; n], vec![1.0; n], vec![2.0; n]))
        .collect();
    // Passes per timing so that one lasts about 20 ms at 20 GB/s.
    let passes = (400_000_000 / (12 * n * threads)).max(1);
    let s = black_box(0.5f32);
    let mut best: f64 = 0.0;
    for _ in 0..6 {
        let t = Instant::now();
        std::thread::scope(|scope| {
            for (a, b, c) in arrays.iter_mut() {
                scope.spawn(move || {
                    for _ in 0..passes {
                        for ((a, b), c) in a.iter_mut().zip(b.iter()).zip(c.iter()) {
                            *a = b + s * c;
                        }
                        black_box(&a);
                    }
                });
            }
        });
        let seconds = t.elapsed().as_secs_f64();
        best = best.max((12 * n * threads * passes) as f64 / seconds / 1e9);
    }
    best
}

/// Bandwidth of each cache level (a working set of half of it, per
/// thread's share) and of DRAM (eight times the largest cache, at least
/// 256 MiB), on `threads` threads.
pub fn bandwidths(caches: &[Cache], threads: usize) -> Vec<Bandwidth> {
    let mut out = Vec::new();
    for cache in caches {
        // A private cache holds one thread's set; a shared one is split.
        let per_thread = cache.kib * 1024 / 2 / cache.shared_by.min(threads).max(1);
        out.push(Bandwidth {
            level: format!("L{}", cache.level),
            bytes: per_thread * threads,
            gbs: triad(per_thread, threads),
        });
    }
    let largest = caches.iter().map(|c| c.kib * 1024).max().unwrap_or(0);
    let dram = (8 * largest).max(256 << 20);
    out.push(Bandwidth {
        level: "DRAM".into(),
        bytes: dram,
        gbs: triad(dram / threads, threads),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_a_triad() {
        assert_eq!(cpu_count("0-3,8"), 5);
        assert_eq!(cpu_count("1"), 1);
        let gbs = triad(64 << 10, 1);
        assert!(gbs > 0.5 && gbs.is_finite(), "{gbs} GB/s");
    }
}
