//! STUB until the ops branch is merged.
#![allow(unused_variables)]
use crate::generate::raster::RgbaImage;
pub enum Strength {
    Subtle,
    Strong,
}
pub enum Direction {
    Up,
    Down,
    Left,
    Right,
}
pub enum Detail {
    Subtle,
    Creative,
}
pub fn resize(src: &RgbaImage, w: u32, h: u32) -> RgbaImage {
    todo!()
}
pub fn upscale_png(src: &RgbaImage, factor: u32, detail: Detail, seed: u64) -> Vec<u8> {
    todo!()
}
pub fn variation(parent: &RgbaImage, strength: Strength, seed: u64, k: u32) -> RgbaImage {
    todo!()
}
pub fn pan(
    parent: &RgbaImage,
    direction: Direction,
    fill: Option<&RgbaImage>,
    seed: u64,
    k: u32,
) -> RgbaImage {
    todo!()
}
pub fn pan_size(w: u32, h: u32, direction: Direction) -> (u32, u32) {
    todo!()
}
pub fn outpaint(
    parent: &RgbaImage,
    out_w: u32,
    out_h: u32,
    zoom: f64,
    fill: Option<&RgbaImage>,
    seed: u64,
    k: u32,
) -> RgbaImage {
    todo!()
}
pub fn outpaint_placement(
    pw: u32,
    ph: u32,
    out_w: u32,
    out_h: u32,
    zoom: f64,
) -> (u32, u32, u32, u32) {
    todo!()
}
pub fn inpaint(parent: &RgbaImage, mask: &RgbaImage, fill: &RgbaImage) -> RgbaImage {
    todo!()
}
pub fn mask_redraws(px: [u8; 4]) -> bool {
    todo!()
}
pub fn blend(inputs: &[RgbaImage], w: u32, h: u32, seed: u64, k: u32) -> RgbaImage {
    todo!()
}
pub fn describe(image: &RgbaImage, scene_words: Option<&[String]>) -> Vec<String> {
    todo!()
}
pub fn shorten(prompt: &str) -> Vec<String> {
    todo!()
}
pub fn important_words(prompt: &str) -> Vec<String> {
    todo!()
}
