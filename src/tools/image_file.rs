//! `read_image`: an image file of the workspace handed to the model as an
//! image, and the one place a file tool's image result is worded (`read` of
//! an image file, for a model that reads images, comes here too).
//!
//! The path goes through the confinement every file tool uses
//! ([`super::fs::resolve`]); the file's size is checked against
//! [`MAX_IMAGE_BYTES`] before a byte of it is read, and [`Image::from_bytes`]
//! decodes it whole under the image limits, so what reaches a backend is a
//! checked image. A model that reads no images is given the image's summary
//! instead; the agent's turn decides that, not the tool.

use serde_json::{json, Value};

use super::fs::{read_capped, resolve};
use super::paths::Missing;
use super::{args, Tool, ToolContext, ToolOutput};
use crate::core::image::MAX_IMAGE_BYTES;
use crate::core::Image;

pub struct ReadImage;

impl Tool for ReadImage {
    fn name(&self) -> &str {
        "read_image"
    }

    fn description(&self) -> &str {
        "Reads an image file (PNG, JPEG, WebP or GIF, at most 20 MiB) in the workspace and shows it \
         to the model, with its path, size in pixels and type."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path of the image, relative to the workspace or absolute inside it"}
            },
            "required": ["file_path"]
        })
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let requested = args::string(args, "file_path");
        let target = match resolve(ctx, requested, Missing::Fail, "read") {
            Ok(target) => target,
            Err(out) => return out,
        };
        let limit = u64::try_from(MAX_IMAGE_BYTES).unwrap_or(u64::MAX);
        let bytes = match read_capped(&target, limit, "an image may have") {
            Ok(bytes) => bytes,
            Err(e) => return ToolOutput::fail(format!("Error: cannot read {requested}: {e}")),
        };
        match Image::from_bytes(bytes) {
            Ok(image) => ToolOutput::image_file(requested, image),
            Err(e) => ToolOutput::fail(format!("Error: {requested} is not a readable image: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::core::image::test_png;
    use crate::core::ToolCall;
    use crate::tools::ToolRegistry;
    use crate::util::fs::test_support::TempDir;

    fn run(ctx: &ToolContext, name: &str, file_path: &str) -> ToolOutput {
        let call = ToolCall {
            id: "1".into(),
            name: name.into(),
            arguments: json!({ "file_path": file_path }),
        };
        ToolRegistry::builtin().run(&call, ctx)
    }

    fn setup(label: &str) -> (TempDir, ToolContext) {
        let dir = TempDir::new(label);
        let ctx = ToolContext::new(&dir.0);
        (dir, ctx)
    }

    #[test]
    fn an_image_inside_the_root_comes_back_as_an_image() {
        let (dir, ctx) = setup("img-ok");
        let png = test_png(3, 2, [10, 20, 30]);
        fs::create_dir(dir.0.join("shots")).unwrap();
        fs::write(dir.0.join("shots/a.png"), &png).unwrap();
        let out = run(&ctx, "read_image", "shots/a.png");
        assert!(!out.error, "{}", out.content);
        assert_eq!(out.content, "shots/a.png, 3x2, image/png");
        assert_eq!(out.summary, "image, 3x2");
        assert_eq!(out.images.len(), 1);
        assert_eq!(out.images[0].at, out.content.len());
        assert_eq!(*out.images[0].image.bytes, png);
        let expected = Image::from_bytes(png).unwrap().sha256;
        assert_eq!(out.images[0].image.sha256, expected);
    }

    #[test]
    fn paths_outside_the_root_are_refused() {
        let (dir, ctx) = setup("img-escape");
        let outside = TempDir::new("img-outside");
        fs::write(outside.0.join("o.png"), test_png(1, 1, [0, 0, 0])).unwrap();
        std::os::unix::fs::symlink(&outside.0, dir.0.join("link")).unwrap();
        let absolute = outside.0.join("o.png").display().to_string();
        for path in ["../o.png", absolute.as_str(), "link/o.png"] {
            let out = run(&ctx, "read_image", path);
            assert!(
                out.error && out.content.starts_with("Error"),
                "{path}: {}",
                out.content
            );
            assert!(out.images.is_empty());
        }
    }

    #[test]
    fn a_file_that_is_no_image_is_a_clear_error() {
        let (dir, ctx) = setup("img-text");
        fs::write(dir.0.join("notes.txt"), "just words\n").unwrap();
        let out = run(&ctx, "read_image", "notes.txt");
        assert!(out.error);
        assert!(
            out.content
                .starts_with("Error: notes.txt is not a readable image: unsupported image type"),
            "{}",
            out.content
        );
        let mut broken = test_png(4, 4, [1, 1, 1]);
        broken.truncate(broken.len() / 2);
        fs::write(dir.0.join("broken.png"), broken).unwrap();
        let out = run(&ctx, "read_image", "broken.png");
        assert!(
            out.error && out.content.contains("does not decode"),
            "{}",
            out.content
        );
        assert!(run(&ctx, "read_image", "missing.png").error);
    }

    #[test]
    fn a_huge_file_is_refused_by_its_size_before_it_is_read() {
        let (dir, ctx) = setup("img-huge");
        // Sparse: the size says more than the limit, no byte needs writing.
        let file = fs::File::create(dir.0.join("huge.png")).unwrap();
        file.set_len(MAX_IMAGE_BYTES as u64 + 1).unwrap();
        let out = run(&ctx, "read_image", "huge.png");
        assert!(out.error);
        assert!(
            out.content.contains(&format!(
                "file is {} bytes, more than the {MAX_IMAGE_BYTES} bytes an image may have",
                MAX_IMAGE_BYTES + 1
            )),
            "{}",
            out.content
        );
    }

    #[test]
    fn read_gives_an_image_only_to_a_model_that_reads_images() {
        let (dir, mut ctx) = setup("img-read");
        let png = test_png(2, 2, [5, 5, 5]);
        fs::write(dir.0.join("p.png"), &png).unwrap();
        let text_only = run(&ctx, "read", "p.png");
        assert!(text_only.images.is_empty());
        assert!(
            text_only.content.contains("binary file of"),
            "{}",
            text_only.content
        );
        ctx.takes_images = true;
        let out = run(&ctx, "read", "p.png");
        assert_eq!(out.content, "p.png, 2x2, image/png");
        assert_eq!(*out.images[0].image.bytes, png);
        // A file that only looks like an image stays base64.
        fs::write(dir.0.join("fake.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
        let out = run(&ctx, "read", "fake.png");
        assert!(out.images.is_empty() && !out.error, "{}", out.content);
        assert!(out.content.contains("binary file of"), "{}", out.content);
    }
}
