//! Image prompts on an imagine workflow (a text-to-image graph): the uploaded image is loaded
//! and encoded into the sampler's starting latent in place of the empty one, repeated for the
//! grid, and the sampler's denoise set from `--iw`, as an image-to-image graph does.

use serde_json::{json, Value};

use super::workflow::{class_of, has_input, next_id, nodes_of, set_input, Graph};
use crate::generate::GenerateError;

/// Where the graph's VAE comes from: what its VAEDecode reads, else a checkpoint loader's.
fn vae_of(graph: &Graph) -> Option<Value> {
    for id in nodes_of(graph, "VAEDecode") {
        if let Some(vae) = graph
            .get(&id)
            .and_then(|n| n.get("inputs"))
            .and_then(|i| i.get("vae"))
        {
            return Some(vae.clone());
        }
    }
    nodes_of(graph, "CheckpointLoaderSimple")
        .first()
        .map(|id| json!([id, 2]))
}

/// Start `sampler` from the uploaded image `image` (a ComfyUI input file name): LoadImage,
/// VAEEncode and RepeatLatentBatch (`count` latents) added, the sampler's `latent_image` and
/// `denoise` set.
pub(super) fn start_from_image(
    graph: &mut Graph,
    sampler: &str,
    image: &str,
    count: usize,
    denoise: f64,
) -> Result<(), GenerateError> {
    let vae = vae_of(graph).ok_or_else(|| {
        GenerateError::Failed(
            "the imagine workflow has no VAE (VAEDecode or CheckpointLoaderSimple) to encode the \
             image prompt with"
                .into(),
        )
    })?;
    let next = next_id(graph);
    let [load, encode, repeat] = [next, next + 1, next + 2].map(|n| n.to_string());
    graph.insert(
        load.clone(),
        json!({ "class_type": "LoadImage", "inputs": { "image": image } }),
    );
    graph.insert(
        encode.clone(),
        json!({ "class_type": "VAEEncode", "inputs": { "pixels": [load, 0], "vae": vae } }),
    );
    graph.insert(
        repeat.clone(),
        json!({
            "class_type": "RepeatLatentBatch",
            "inputs": { "samples": [encode, 0], "amount": count },
        }),
    );
    set_input(graph, sampler, "latent_image", json!([repeat, 0]));
    if has_input(graph, sampler, "denoise") || class_of(graph, sampler) == Some("KSampler") {
        set_input(graph, sampler, "denoise", json!(denoise));
    }
    Ok(())
}
