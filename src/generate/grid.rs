//! The 2x2 grid of a task's four images, made from their stored files: after the task is
//! recorded (the worker), or when the grid is asked for before it is there (`GET /files`).
//! Making it decodes all four, so it is most of a task's own CPU time at model sizes; a task
//! whose grid follows it is finished as soon as its four files are stored.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::inputs::{decode, InputLimits};
use super::raster::{compose_grid, RgbaImage};
use super::stored::{Format, StoredImage};

/// The grid's format for images of `formats`: JPEG when all are JPEG (a lossless grid of lossy
/// pictures buys nothing and weighs ten times as much), PNG otherwise.
pub fn format_for(formats: impl IntoIterator<Item = Format>) -> Format {
    let mut formats = formats.into_iter().peekable();
    if formats.peek().is_some() && formats.all(|f| f == Format::Jpeg) {
        Format::Jpeg
    } else {
        Format::Png
    }
}

/// The format a stored image's key names by its extension (`0.jpg`), if it is one easel writes.
pub fn format_of_key(key: &str) -> Option<Format> {
    match key.rsplit_once('.')?.1 {
        "png" => Some(Format::Png),
        "jpg" => Some(Format::Jpeg),
        _ => None,
    }
}

/// The grid of four stored images (PNG or JPEG files, all the same size), encoded as `format`.
/// They are decoded side by side ([`side_by_side`]); a file that does not decode is an
/// error naming it. CPU work: call it from a blocking thread.
pub fn make(files: [&[u8]; 4], format: Format) -> Result<StoredImage, String> {
    let decoded = side_by_side(&files, |i, bytes| {
        decode(bytes, &InputLimits::default())
            .map_err(|e| format!("image {} does not decode: {e}", i + 1))
    });
    let pixels: Vec<RgbaImage> = decoded.into_iter().collect::<Result<_, _>>()?;
    let pixels: [RgbaImage; 4] = pixels.try_into().expect("four files, four images");
    let grid = compose_grid(&pixels);
    drop(pixels);
    // The key already names the format: a grid that cannot be a JPEG is an error, not a PNG
    // under a `.jpg` name (four JPEGs of one size always make one).
    match format {
        Format::Jpeg => {
            StoredImage::jpeg(&grid).map_err(|e| format!("images make no JPEG grid: {e}"))
        }
        Format::Png => Ok(StoredImage::png(&grid)),
    }
}

/// `work` on each of `items` (with its position), the results in order; a panic in one is
/// resumed here. The calling thread works too, beside at most one scoped thread per further CPU
/// this process may use, each taking the next item left: a thread per item cost more to start
/// than a small image takes to check, and more threads than CPUs only take turns. CPU work:
/// call it from a blocking thread.
pub fn side_by_side<T: Sync, R: Send>(items: &[T], work: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    let threads = cpus().min(items.len());
    let next = AtomicUsize::new(0);
    let run = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, work(i, item)));
        }
    };
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(run)).collect();
        let mut done = run();
        for helper in helpers {
            done.extend(
                helper
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e)),
            );
        }
        done
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
}

/// The CPUs this process may use, read once (it reads the cgroup's quota from files).
fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picture(w: u32, h: u32, shade: u8) -> RgbaImage {
        let mut image = RgbaImage::new(w, h);
        for (i, px) in image.data.chunks_exact_mut(4).enumerate() {
            px.copy_from_slice(&[shade, (i % 251) as u8, 255 - shade, 255]);
        }
        image
    }

    #[test]
    fn the_grid_of_jpeg_files_is_jpeg_and_of_any_png_is_png() {
        use Format::*;
        assert_eq!(format_for([Jpeg, Jpeg, Jpeg, Jpeg]), Jpeg);
        assert_eq!(format_for([Jpeg, Png, Jpeg, Jpeg]), Png);
        assert_eq!(format_for([Png; 4]), Png);
        assert_eq!(format_for([]), Png);
        assert_eq!(format_of_key("t/f/grid.jpg"), Some(Jpeg));
        assert_eq!(format_of_key("t/f/0.png"), Some(Png));
        assert_eq!(format_of_key("t/f/0.webp"), None);
    }

    #[test]
    fn a_grid_is_the_first_images_size_with_each_image_in_its_quarter() {
        let files: Vec<StoredImage> = [10u8, 80, 160, 240]
            .iter()
            .map(|&shade| StoredImage::png(&picture(64, 48, shade)))
            .collect();
        let grid = make(
            std::array::from_fn(|i| files[i].bytes.as_slice()),
            Format::Png,
        )
        .unwrap();
        assert_eq!(grid.format, Format::Png);
        let pixels = decode(&grid.bytes, &InputLimits::default()).unwrap();
        assert_eq!((pixels.width, pixels.height), (64, 48));
        // The red channel of each quarter's middle is its image's shade.
        for (k, (x, y)) in [(16, 12), (48, 12), (16, 36), (48, 36)].iter().enumerate() {
            let at = ((y * 64 + x) * 4) as usize;
            assert_eq!(pixels.data[at], [10u8, 80, 160, 240][k], "quarter {k}");
        }
        let jpeg = make(
            std::array::from_fn(|i| files[i].bytes.as_slice()),
            Format::Jpeg,
        )
        .unwrap();
        assert_eq!(jpeg.format, Format::Jpeg);
    }

    #[test]
    fn side_by_side_answers_in_order_on_no_more_threads_than_cpus() {
        let items: Vec<u32> = (0..37).collect();
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        let out = side_by_side(&items, |i, &v| {
            threads.lock().unwrap().insert(std::thread::current().id());
            (i, v * 3)
        });
        assert_eq!(
            out,
            (0..37).map(|v| (v as usize, v * 3)).collect::<Vec<_>>()
        );
        let used = threads.lock().unwrap().len();
        assert!(
            (1..=cpus()).contains(&used),
            "{used} threads, {} CPUs",
            cpus()
        );
        assert!(side_by_side(&[] as &[u32], |_, &v| v).is_empty());
        let panicked = std::panic::catch_unwind(|| {
            side_by_side(&items, |i, _| assert!(i != 30, "item 30"));
        });
        assert!(panicked.is_err());
    }

    #[test]
    fn a_file_that_does_not_decode_is_named() {
        let good = StoredImage::png(&picture(8, 8, 1));
        let mut bad = good.bytes.clone();
        let half = bad.len() / 2;
        bad.truncate(half);
        let e = make([&good.bytes, &good.bytes, &bad, &good.bytes], Format::Png).unwrap_err();
        assert!(e.contains("image 3"), "{e}");
    }
}
