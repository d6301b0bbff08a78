//! The process's allocator: mimalloc (v2 series), entered through its plain C functions whenever
//! the requested alignment is one mimalloc gives anyway.
//!
//! Written here instead of using the `mimalloc` crate's `MiMalloc`, which sends every request
//! through `mi_malloc_aligned`/`mi_realloc_aligned`: those check and dispatch before reaching the
//! same allocation, and take a slower generic path for every block over 1 KiB (hyper's read and
//! write buffers, several per proxied call); the plain entry points are measurably cheaper
//! (benches/RESULTS.md). The same change is proposed upstream (purpleprotocol/mimalloc_rust pull
//! request 170).

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// mimalloc's allocator for `#[global_allocator]`.
pub struct Mimalloc;

/// Whether a block from `mi_malloc(size)` is already aligned to `align`: mimalloc's own rule
/// (`mi_malloc_is_naturally_aligned` in `alloc-aligned.c`, v2): an alignment of at most
/// `MI_MAX_ALIGN_SIZE` (16) that does not exceed the size.
#[inline(always)]
fn natural(size: usize, align: usize) -> bool {
    align <= 16 && align <= size
}

// SAFETY: every path hands the request to mimalloc, which returns null or a block of at least
// `size` bytes aligned to `align` (the plain functions only where `natural` says their blocks
// are), and frees or resizes only blocks it returned.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; mimalloc accepts any size and a power-of-two alignment.
        unsafe {
            if natural(layout.size(), layout.align()) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if natural(layout.size(), layout.align()) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from mimalloc.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from mimalloc; a block resized in place keeps its (already
        // sufficient) alignment, a moved one is allocated under the same rule as in `alloc`.
        unsafe {
            if natural(new_size, layout.align()) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size and alignment mix a program asks for comes back aligned, usable, and zeroed
    /// where asked; reallocation keeps the contents and the alignment.
    #[test]
    fn blocks_are_aligned_writable_and_resizable() {
        let a = Mimalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [
                1usize,
                3,
                8,
                15,
                16,
                24,
                40,
                100,
                1000,
                1025,
                8192,
                70_000,
                3 << 20,
            ] {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    std::ptr::write_bytes(p, 0xab, size);
                    let grown = size * 3 + 7;
                    let q = a.realloc(p, layout, grown);
                    assert_eq!(q as usize % align, 0, "realloc {grown} align {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xab));
                    a.dealloc(q, Layout::from_size_align(grown, align).unwrap());
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }
}

/// How often, at most, an idle runtime thread hands its freed memory back to the system.
pub const GIVE_BACK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

thread_local! {
    static LAST_GIVE_BACK: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// Called when a runtime thread has nothing to do (tokio's `on_thread_park`): at most once per
/// [`GIVE_BACK_EVERY`], lets mimalloc purge what this thread freed (`mi_collect(true)`: the
/// delayed purges it would otherwise do only on a later allocation, and the pages it keeps for
/// reuse, which `false` leaves resident by chance). Without it, the memory of a burst of
/// connections that has since closed stays resident for the life of an idle process
/// (benches/RESULTS.md has the measurements). A busy thread rarely parks, and then at most once a
/// second: nothing on the hot path.
pub fn give_back_when_idle() {
    LAST_GIVE_BACK.with(|last| {
        let now = std::time::Instant::now();
        if last
            .get()
            .is_some_and(|t| now.duration_since(t) < GIVE_BACK_EVERY)
        {
            return;
        }
        last.set(Some(now));
        // SAFETY: a plain FFI call with no pointer arguments; it works on the calling thread's
        // own heap.
        unsafe { mi::mi_collect(true) };
    });
}
