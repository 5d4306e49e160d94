//! What a finished task produced, and the columns both stores keep it in.

use serde::{Deserialize, Serialize};

use super::operation::{Shape, StoredImage};
use super::wire::ResultFields;

/// What a finished task produced. Images are named by their blob keys; their URLs are made when
/// a record or payload is written out, so that `public_url` can change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Four images of `width` x `height` and their grid (the same size).
    Grid {
        grid_key: String,
        image_keys: Vec<String>,
        width: u32,
        height: u32,
    },
    Single {
        image_key: String,
        width: u32,
        height: u32,
    },
    Text {
        content: Vec<String>,
    },
    Seed {
        seed: i64,
    },
}

/// The columns an output is stored in: the grid's key, the images' keys, and the rest as JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputColumns {
    pub grid_key: Option<String>,
    pub image_keys: Option<Vec<String>>,
    pub result: Option<String>,
}

#[derive(Serialize, Deserialize, Default)]
struct ResultColumn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
}

impl Output {
    pub fn shape(&self) -> Shape {
        match self {
            Output::Grid { .. } => Shape::Grid,
            Output::Single { .. } => Shape::Single,
            Output::Text { .. } => Shape::Text,
            Output::Seed { .. } => Shape::Seed,
        }
    }

    /// How many images it counts toward the account's total.
    pub fn images(&self) -> i64 {
        match self {
            Output::Grid { image_keys, .. } => image_keys.len() as i64,
            Output::Single { .. } => 1,
            Output::Text { .. } | Output::Seed { .. } => 0,
        }
    }

    /// The pixels of its images (a grid's four, not the grid made of them).
    pub fn pixels(&self) -> i64 {
        match self {
            Output::Grid { width, height, .. } | Output::Single { width, height, .. } => {
                self.images() * i64::from(*width) * i64::from(*height)
            }
            Output::Text { .. } | Output::Seed { .. } => 0,
        }
    }

    pub fn to_columns(&self) -> OutputColumns {
        let result = |r: ResultColumn| Some(serde_json::to_string(&r).expect("serializes"));
        match self {
            Output::Grid {
                grid_key,
                image_keys,
                width,
                height,
            } => OutputColumns {
                grid_key: Some(grid_key.clone()),
                image_keys: Some(image_keys.clone()),
                result: result(ResultColumn {
                    width: Some(*width),
                    height: Some(*height),
                    ..Default::default()
                }),
            },
            Output::Single {
                image_key,
                width,
                height,
            } => OutputColumns {
                grid_key: None,
                image_keys: Some(vec![image_key.clone()]),
                result: result(ResultColumn {
                    width: Some(*width),
                    height: Some(*height),
                    ..Default::default()
                }),
            },
            Output::Text { content } => OutputColumns {
                result: result(ResultColumn {
                    content: Some(content.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Output::Seed { seed } => OutputColumns {
                result: result(ResultColumn {
                    seed: Some(*seed),
                    ..Default::default()
                }),
                ..Default::default()
            },
        }
    }

    /// A finished task's output from its columns, or `None` when they do not hold one of
    /// `shape` (a task that has not finished). Grid rows stored before sizes were recorded
    /// read as 0 x 0.
    pub fn from_columns(shape: Shape, columns: OutputColumns) -> Option<Output> {
        let result: ResultColumn = columns
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default();
        let (width, height) = (result.width.unwrap_or(0), result.height.unwrap_or(0));
        match shape {
            Shape::Grid => Some(Output::Grid {
                grid_key: columns.grid_key?,
                image_keys: columns.image_keys?,
                width,
                height,
            }),
            Shape::Single => Some(Output::Single {
                image_key: columns.image_keys?.into_iter().next()?,
                width,
                height,
            }),
            Shape::Text => Some(Output::Text {
                content: result.content?,
            }),
            Shape::Seed => Some(Output::Seed { seed: result.seed? }),
        }
    }

    /// The result fields of a record or payload, with `url` making an image's address.
    pub fn public_fields(&self, url: &dyn Fn(&str) -> String) -> ResultFields {
        let none = ResultFields::default();
        match self {
            Output::Grid {
                grid_key,
                image_keys,
                ..
            } => ResultFields {
                original_image_url: Some(url(grid_key)),
                image_urls: Some(image_keys.iter().map(|k| url(k)).collect()),
                ..none
            },
            Output::Single { image_key, .. } => ResultFields {
                image_url: Some(url(image_key)),
                ..none
            },
            Output::Text { content } => ResultFields {
                content: Some(content.clone()),
                ..none
            },
            Output::Seed { seed } => ResultFields {
                seed: Some(*seed),
                ..none
            },
        }
    }

    /// The image of a single, or image `index` (1..=4) of a grid, with its size.
    pub fn image(&self, index: Option<u8>) -> Option<StoredImage> {
        match (self, index) {
            (
                Output::Grid {
                    image_keys,
                    width,
                    height,
                    ..
                },
                Some(i),
            ) => image_keys
                .get(usize::from(i).checked_sub(1)?)
                .map(|key| StoredImage {
                    key: key.clone(),
                    width: *width,
                    height: *height,
                }),
            (
                Output::Single {
                    image_key,
                    width,
                    height,
                },
                None,
            ) => Some(StoredImage {
                key: image_key.clone(),
                width: *width,
                height: *height,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_round_trip_through_their_columns() {
        let outputs = [
            Output::Grid {
                grid_key: "t/f/grid.png".into(),
                image_keys: (0..4).map(|i| format!("t/f/{i}.png")).collect(),
                width: 1024,
                height: 576,
            },
            Output::Single {
                image_key: "t/f/0.png".into(),
                width: 2048,
                height: 2048,
            },
            Output::Text {
                content: vec!["a".into(), "b".into()],
            },
            Output::Seed { seed: 42 },
        ];
        for out in outputs {
            let back = Output::from_columns(out.shape(), out.to_columns()).unwrap();
            assert_eq!(back, out);
        }
        assert_eq!(
            Output::from_columns(Shape::Grid, OutputColumns::default()),
            None
        );
    }
}
