//! Image prompts on the procedural generator: the scene the text draws, with the image prompts
//! (blended together when there are several) laid over it at the weight `--iw` gives them.

use crate::images::RgbaImage;

use super::blend;

/// How much of the image prompts shows for `--iw` = `iw` (0..=3): `iw / (iw + 1)`, so that the
/// default 1 is half of each, 0 is the text alone and 3 is three quarters image.
pub fn image_share(iw: f64) -> f64 {
    let iw = if iw.is_finite() {
        iw.clamp(0.0, 3.0)
    } else {
        1.0
    };
    iw / (iw + 1.0)
}

/// The denoising strength a model backend starts from an image prompt with: how much of it is
/// redrawn. `--iw` 1 keeps 40 % of the image (0.6), 3 keeps 60 % (0.4), 0 redraws it all.
pub fn image_prompt_denoising(iw: f64) -> f64 {
    1.0 - 0.8 * image_share(iw)
}

/// The one image a model backend starts from: the image prompts blended (one covers it),
/// `w` x `h`.
pub fn image_prompt_canvas(images: &[RgbaImage], w: u32, h: u32, seed: u64) -> RgbaImage {
    blend(images, w, h, seed, 0)
}

/// Image `k` of a grid whose `scene` (drawn from the text) is mixed with the image prompts
/// `images`, covering the scene's size, at `share` (0..=1) of the image prompts.
pub fn image_prompted(
    scene: RgbaImage,
    images: &[RgbaImage],
    share: f64,
    seed: u64,
    k: u32,
) -> RgbaImage {
    if images.is_empty() || share <= 0.0 {
        return scene;
    }
    let over = blend(images, scene.width, scene.height, seed, k);
    let mut out = scene;
    for (px, img) in out.data.iter_mut().zip(&over.data) {
        let mixed = f64::from(*px) * (1.0 - share) + f64::from(*img) * share;
        *px = mixed.round().clamp(0.0, 255.0) as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(w: u32, h: u32, v: u8) -> RgbaImage {
        RgbaImage {
            width: w,
            height: h,
            data: vec![v; (w * h * 4) as usize],
        }
    }

    #[test]
    fn the_weight_moves_the_image_toward_the_image_prompt() {
        assert_eq!(image_share(1.0), 0.5);
        assert_eq!(image_share(0.0), 0.0);
        assert_eq!(image_share(3.0), 0.75);
        assert!((image_prompt_denoising(1.0) - 0.6).abs() < 1e-9);
        assert!((image_prompt_denoising(3.0) - 0.4).abs() < 1e-9);
        assert_eq!(image_prompt_denoising(0.0), 1.0);
        let scene = flat(8, 6, 0);
        let prompt = [flat(4, 4, 200)];
        assert_eq!(image_prompted(scene.clone(), &prompt, 0.0, 1, 0), scene);
        let half = image_prompted(scene.clone(), &prompt, 0.5, 1, 0);
        assert_eq!((half.width, half.height), (8, 6));
        assert!(half.data.iter().all(|&v| v == 100), "{:?}", &half.data[..8]);
        let most = image_prompted(scene, &prompt, 0.75, 1, 0);
        assert!(most.data.iter().all(|&v| v == 150));
    }
}
