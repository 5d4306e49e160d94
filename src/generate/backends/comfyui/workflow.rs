//! Workflows: the operator's API-format graphs, where easel finds the nodes it writes to and
//! how it writes a job into them.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use super::inputs::Prepared;
use crate::config::samplers;
use crate::domain::parameters::REFERENCES;
use crate::domain::{OpKind, Operation, Shape};
use crate::generate::backends::edits::size_for;
use crate::generate::{GenerateError, Job};

/// Class types of the nodes easel finds on its own.
pub(super) const SAMPLERS: [&str; 2] = ["KSampler", "KSamplerAdvanced"];
pub(super) const IMAGE_LOADER: &str = "LoadImage";
pub(super) const MASK_LOADER: &str = "LoadImageMask";
pub(super) const SAVE_IMAGE: &str = "SaveImage";
/// A core node that repeats a latent batch: how an image-to-image graph (one encoded image)
/// is made to give a grid's four.
pub(super) const REPEAT_LATENT: &str = "RepeatLatentBatch";
/// The core node that loads a checkpoint: its `ckpt_name` is the model's checkpoint.
pub(super) const CHECKPOINT_LOADER: &str = "CheckpointLoaderSimple";

pub(super) type Graph = Map<String, Value>;

/// One workflow with the nodes easel writes to, found when the backend is built.
#[derive(Debug)]
pub(super) struct Workflow {
    pub(super) graph: Graph,
    pub(super) sampler: Option<String>,
    /// The node and input that take the prompt's text.
    pub(super) prompt: Vec<(String, String)>,
    /// The node and input that take the negative prompt (the sampler's `negative` encoder).
    pub(super) negative: Vec<(String, String)>,
    /// The checkpoint loader (`nodes.checkpoint`, else the first CheckpointLoaderSimple).
    pub(super) checkpoint: Option<String>,
    /// The node and input that take the seed.
    pub(super) seed: Option<(String, String)>,
    /// The node the sampler's `latent_image` comes from.
    pub(super) latent: Option<String>,
    /// Image loaders, in the order the job's inputs fill them.
    pub(super) images: Vec<String>,
    pub(super) mask: Option<String>,
    /// Where the results are read from: `nodes.output`, else the SaveImage nodes.
    pub(super) outputs: Vec<String>,
    /// ImageScaleBy / LatentUpscaleBy nodes, whose factor an upscale sets.
    pub(super) scalers: Vec<String>,
    /// The placeholders for the prompt's reference images: `nodes.sref`, `nodes.cref`,
    /// `nodes.oref`, each a list of image loaders, with the parameter's name.
    pub(super) references: Vec<(&'static str, Vec<String>)>,
}

/// Node ids sort as numbers where they are numbers.
pub(super) fn node_order(id: &str) -> (u64, String) {
    (id.parse().unwrap_or(u64::MAX), id.to_string())
}

/// The node an input links to (`[node_id, output_index]`), if it is a link.
fn link(graph: &Graph, node: &str, input: &str) -> Option<String> {
    let value = graph.get(node)?.get("inputs")?.get(input)?;
    match value.as_array()?.first()? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The id after the graph's highest numeric one: where nodes added to it start.
pub(super) fn next_id(graph: &Graph) -> u64 {
    graph
        .keys()
        .filter_map(|id| id.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
        + 1
}

pub(super) fn class_of<'g>(graph: &'g Graph, node: &str) -> Option<&'g str> {
    graph.get(node)?.get("class_type")?.as_str()
}

pub(super) fn has_input(graph: &Graph, node: &str, input: &str) -> bool {
    graph
        .get(node)
        .and_then(|n| n.get("inputs"))
        .is_some_and(|i| i.get(input).is_some())
}

pub(super) fn set_input(graph: &mut Graph, node: &str, input: &str, value: Value) {
    if let Some(inputs) = graph
        .get_mut(node)
        .and_then(|n| n.get_mut("inputs"))
        .and_then(Value::as_object_mut)
    {
        inputs.insert(input.to_string(), value);
    }
}

/// Ids of the nodes of a class, in id order.
pub(super) fn nodes_of(graph: &Graph, class: &str) -> Vec<String> {
    let mut ids: Vec<String> = graph
        .keys()
        .filter(|id| class_of(graph, id) == Some(class))
        .cloned()
        .collect();
    ids.sort_by_key(|id| node_order(id));
    ids
}

/// The text inputs of a text encoder `node` (`text`, or SDXL's `text_g` and `text_l`), or of
/// the primitive node its text comes from.
fn text_inputs(graph: &Graph, node: Option<&str>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let Some(node) = node else { return found };
    for input in ["text", "text_g", "text_l"] {
        match link(graph, node, input) {
            // The text comes from another node (a primitive): write it there.
            Some(source) => {
                for field in ["text", "value", "string"] {
                    if has_input(graph, &source, field) {
                        found.push((source.clone(), field.to_string()));
                        break;
                    }
                }
            }
            None if has_input(graph, node, input) => {
                found.push((node.to_string(), input.to_string()))
            }
            None => {}
        }
    }
    found
}

impl Workflow {
    /// Read `path` and find its nodes for operation `kind`.
    pub(super) fn load(
        path: &Path,
        kind: OpKind,
        names: &BTreeMap<String, String>,
    ) -> Result<Workflow, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        let value: Value =
            serde_json::from_str(&text).map_err(|e| format!("is not valid JSON: {e}"))?;
        let Value::Object(graph) = value else {
            return Err("is not a JSON object of nodes".into());
        };
        if graph.contains_key("nodes") && graph.contains_key("links") {
            return Err(
                "is a UI-format workflow; export it with \"Save (API Format)\" instead".into(),
            );
        }
        for (id, node) in &graph {
            if node.get("class_type").and_then(Value::as_str).is_none()
                || !node.get("inputs").is_some_and(Value::is_object)
            {
                return Err(format!("node {id} has no class_type or inputs"));
            }
        }
        Workflow::resolve(graph, kind, names)
    }

    pub(super) fn resolve(
        graph: Graph,
        kind: OpKind,
        names: &BTreeMap<String, String>,
    ) -> Result<Workflow, String> {
        let named = |key: &str| -> Result<Option<String>, String> {
            match names.get(key) {
                Some(id) if graph.contains_key(id) => Ok(Some(id.clone())),
                Some(id) => Err(format!(
                    "nodes.{key} names node {id}, which it does not have"
                )),
                None => Ok(None),
            }
        };
        let from_text = kind == OpKind::Imagine || kind == OpKind::Reroll;
        let grid = kind.shape() == Shape::Grid;

        let sampler = match named("sampler")? {
            Some(id) => Some(id),
            None => {
                let mut all: Vec<String> =
                    SAMPLERS.iter().flat_map(|c| nodes_of(&graph, c)).collect();
                all.sort_by_key(|id| node_order(id));
                // With several (a two-pass graph), the one that starts from an empty latent.
                all.iter()
                    .find(|id| {
                        link(&graph, id, "latent_image")
                            .and_then(|l| class_of(&graph, &l).map(|c| c.starts_with("Empty")))
                            .unwrap_or(false)
                    })
                    .or(all.first())
                    .cloned()
            }
        };
        if sampler.is_none() && (grid || from_text) {
            return Err(
                "has no sampler (KSampler or KSamplerAdvanced); name it with nodes.sampler".into(),
            );
        }

        let prompt_node = match named("prompt")? {
            Some(id) => Some(id),
            None => sampler.as_ref().and_then(|s| link(&graph, s, "positive")),
        };
        let prompt = text_inputs(&graph, prompt_node.as_deref());
        let negative_node = match named("negative")? {
            Some(id) => Some(id),
            None => sampler.as_ref().and_then(|s| link(&graph, s, "negative")),
        };
        let negative = text_inputs(&graph, negative_node.as_deref());
        let checkpoint = match named("checkpoint")? {
            Some(id) => Some(id),
            None => nodes_of(&graph, CHECKPOINT_LOADER).into_iter().next(),
        };
        if prompt.is_empty() && from_text {
            return Err(
                "the sampler's positive input leads to no text encoder (CLIPTextEncode); name it with nodes.prompt"
                    .into(),
            );
        }

        let seed_fields = ["noise_seed", "seed", "value"];
        let seed = match named("seed")? {
            Some(id) => {
                let field = seed_fields
                    .iter()
                    .find(|f| has_input(&graph, &id, f))
                    .ok_or_else(|| format!("node {id} (nodes.seed) has no seed input"))?;
                Some((id, field.to_string()))
            }
            None => sampler.as_ref().and_then(|s| {
                let field = ["noise_seed", "seed"]
                    .into_iter()
                    .find(|f| has_input(&graph, s, f))?;
                match link(&graph, s, field) {
                    Some(source) => seed_fields
                        .iter()
                        .find(|f| has_input(&graph, &source, f))
                        .map(|f| (source.clone(), f.to_string())),
                    None => Some((s.clone(), field.to_string())),
                }
            }),
        };

        let latent = match named("latent")? {
            Some(id) => Some(id),
            None => sampler
                .as_ref()
                .and_then(|s| link(&graph, s, "latent_image")),
        };
        if from_text {
            let ok = latent.as_ref().is_some_and(|l| {
                ["width", "height", "batch_size"]
                    .iter()
                    .all(|f| has_input(&graph, l, f))
            });
            if !ok {
                return Err(
                    "the sampler's latent_image leads to no empty latent (EmptyLatentImage); name it with nodes.latent"
                        .into(),
                );
            }
        }

        let mask = match named("mask")? {
            Some(id) => Some(id),
            None => nodes_of(&graph, MASK_LOADER).into_iter().next(),
        };
        let listed = |key: &str| -> Result<Option<Vec<String>>, String> {
            let Some(list) = names.get(key) else {
                return Ok(None);
            };
            let ids: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
            for id in &ids {
                if !graph.contains_key(id) {
                    return Err(format!(
                        "nodes.{key} names node {id}, which it does not have"
                    ));
                }
                if key != "image" && !has_input(&graph, id, "image") {
                    return Err(format!(
                        "nodes.{key} names node {id}, which has no image input (a LoadImage)"
                    ));
                }
            }
            Ok(Some(ids))
        };
        let mut references = Vec::new();
        for key in REFERENCES {
            if let Some(ids) = listed(key)? {
                references.push((key, ids));
            }
        }
        let placeholders: Vec<&String> = references.iter().flat_map(|(_, ids)| ids).collect();
        let images: Vec<String> = match listed("image")? {
            Some(ids) => ids,
            None => nodes_of(&graph, IMAGE_LOADER)
                .into_iter()
                .filter(|id| Some(id) != mask.as_ref() && !placeholders.contains(&id))
                .collect(),
        };
        let reads_images = !from_text;
        if reads_images && images.is_empty() {
            return Err("has no image loader (LoadImage); name it with nodes.image".into());
        }

        let outputs = match named("output")? {
            Some(id) => vec![id],
            None => nodes_of(&graph, SAVE_IMAGE),
        };
        let mut scalers: Vec<String> = ["ImageScaleBy", "LatentUpscaleBy"]
            .iter()
            .flat_map(|c| nodes_of(&graph, c))
            .collect();
        scalers.sort_by_key(|id| node_order(id));

        Ok(Workflow {
            graph,
            sampler,
            prompt,
            negative,
            checkpoint,
            seed,
            latent,
            images,
            mask: if reads_images { mask } else { None },
            outputs,
            scalers,
            references,
        })
    }

    /// Whether `job` is an imagine (or reroll) with image prompts on a graph without image
    /// loaders: the image is then encoded into the sampler's latent (`prompted::start_from_image`).
    pub(super) fn takes_image_prompts(&self, job: &Job) -> bool {
        matches!(job.operation, Operation::Imagine | Operation::Reroll)
            && self.images.is_empty()
            && !job.inputs.is_empty()
    }

    /// Write the task's settings into `graph`: the sampler's steps, guidance and sampler (with
    /// its scheduler), the negative prompt, the checkpoint. A setting the task has none of (one
    /// stored before settings were) leaves the workflow's own value.
    pub(super) fn settle(&self, graph: &mut Graph, job: &Job, checkpoint: Option<&str>) {
        let settings = &job.extras.settings;
        if let Some(sampler) = &self.sampler {
            let mut set = |input: &str, value: Value| {
                if has_input(graph, sampler, input) {
                    set_input(graph, sampler, input, value);
                }
            };
            if let Some(steps) = settings.steps {
                set("steps", json!(steps));
            }
            if let Some(cfg) = settings.cfg_scale {
                set("cfg", json!(cfg));
            }
            // Known to ComfyUI: checked at submit against the model's backends.
            if let Some((name, scheduler)) = settings
                .sampler
                .as_deref()
                .and_then(samplers::sampler)
                .and_then(|s| s.comfy)
            {
                set("sampler_name", json!(name));
                set("scheduler", json!(scheduler));
            }
        }
        if let Some(negative) = &settings.negative_prompt {
            for (node, input) in &self.negative {
                set_input(graph, node, input, json!(negative));
            }
        }
        if let (Some(node), Some(checkpoint)) = (&self.checkpoint, checkpoint) {
            set_input(graph, node, "ckpt_name", json!(checkpoint));
        }
    }

    /// Write the job into `graph`: the prompt, the seed, the size and batch, the uploaded files.
    pub(super) fn fill(
        &self,
        graph: &mut Graph,
        job: &Job,
        count: usize,
        prepared: &Prepared,
        uploaded: &[String],
        mask: Option<&str>,
    ) -> Result<(), GenerateError> {
        // `::` weights in ComfyUI's `(text:w)`, as its text encoders read them.
        let prompt = job.extras.parameters.weighted_prompt(&job.prompt);
        for (node, input) in &self.prompt {
            set_input(graph, node, input, json!(prompt));
        }
        if let Some((node, input)) = &self.seed {
            set_input(graph, node, input, json!(job.seed));
        }
        if let Some(latent) = &self.latent {
            if has_input(graph, latent, "width") && has_input(graph, latent, "height") {
                // A new image's size; an edit's comes from its input.
                let (w, h) = match (&job.operation, prepared.size) {
                    (Operation::Imagine | Operation::Reroll | Operation::Blend { .. }, _)
                    | (_, None) => size_for(job, 8),
                    (_, Some((w, h))) => (w.div_ceil(8).max(1) * 8, h.div_ceil(8).max(1) * 8),
                };
                set_input(graph, latent, "width", json!(w));
                set_input(graph, latent, "height", json!(h));
            }
            if has_input(graph, latent, "batch_size") {
                set_input(graph, latent, "batch_size", json!(count));
            } else if class_of(graph, latent) == Some(REPEAT_LATENT) {
                set_input(graph, latent, "amount", json!(count));
            } else if count > 1 {
                // An encoded image is one latent: repeat it for the grid's four.
                if let Some(sampler) = &self.sampler {
                    let id = next_id(graph).to_string();
                    let source = graph
                        .get(sampler)
                        .and_then(|n| n.get("inputs"))
                        .and_then(|i| i.get("latent_image"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    graph.insert(
                        id.clone(),
                        json!({
                            "class_type": REPEAT_LATENT,
                            "inputs": { "samples": source, "amount": count },
                        }),
                    );
                    set_input(graph, sampler, "latent_image", json!([id, 0]));
                }
            }
        }
        let factor = match &job.operation {
            Operation::UpscaleHighres { factor, .. } => Some(f64::from(*factor)),
            Operation::UpscaleAlt { .. } => Some(2.0),
            _ => None,
        };
        if let Some(factor) = factor {
            for node in &self.scalers {
                set_input(graph, node, "scale_by", json!(factor));
            }
        }
        // Image prompts on a text-to-image graph are wired in by `prompted`, not loaders.
        if !uploaded.is_empty() && !self.takes_image_prompts(job) {
            if uploaded.len() > self.images.len() {
                return Err(GenerateError::Failed(format!(
                    "the workflow has {} image loaders; this job has {} images",
                    self.images.len(),
                    uploaded.len()
                )));
            }
            // Fewer images than loaders: they are used again in turn.
            for (k, node) in self.images.iter().enumerate() {
                set_input(graph, node, "image", json!(uploaded[k % uploaded.len()]));
            }
        }
        if let (Some(node), Some(name)) = (&self.mask, mask) {
            set_input(graph, node, "image", json!(name));
        }
        Ok(())
    }

    /// Which of `job`'s reference images have a placeholder here: their indexes in
    /// `job.references`.
    pub(super) fn references_taken(&self, job: &Job) -> Vec<usize> {
        let params = job.extras.references.iter().map(|r| r.param.as_str());
        params
            .enumerate()
            .filter(|(k, param)| {
                *k < job.references.len() && self.references.iter().any(|(p, _)| p == param)
            })
            .map(|(k, _)| k)
            .collect()
    }

    /// Write the uploaded reference images (`uploaded`: the parameter and the file name, in
    /// the job's order) into their placeholders: each parameter's images fill its loaders in
    /// turn, used again when there are fewer images than loaders.
    pub(super) fn fill_references(&self, graph: &mut Graph, uploaded: &[(&str, String)]) {
        for (param, nodes) in &self.references {
            let files: Vec<&String> = uploaded
                .iter()
                .filter(|(p, _)| p == param)
                .map(|(_, name)| name)
                .collect();
            if files.is_empty() {
                continue;
            }
            for (k, node) in nodes.iter().enumerate() {
                set_input(graph, node, "image", json!(files[k % files.len()]));
            }
        }
    }
}
