//! Decoding the four accepted formats to 8-bit RGB, in Rust, under limits.
//!
//! Each decoder reads the header first; the width and height it claims are
//! checked against [`MAX_SIDE`] and [`MAX_PIXELS`] before a pixel buffer is
//! allocated, so a 10,000 x 10,000 header over a tiny body costs nothing. GIF
//! and animated WebP give their first frame only; later frames are never read.

use std::io::Cursor;

use super::ImageError;

/// The largest encoded file accepted (OpenAI's own limit per image).
pub const MAX_IMAGE_BYTES: usize = 20 * 1024 * 1024;
/// The longest side, in pixels.
pub const MAX_SIDE: u32 = 16_384;
/// The most pixels (a 48 MP phone photo, 8000 x 6000, fits); 150 MB as RGB.
pub const MAX_PIXELS: u64 = 50_331_648;
/// The most frames a GIF may have: only the first is read, but a file of
/// thousands is an attack on whatever reads it next, not a picture.
pub const MAX_GIF_FRAMES: usize = 1_000;

/// An image decoded to 8-bit RGB, row by row, three bytes a pixel.
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// The formats shepherd decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
    WebP,
    Gif,
}

impl Format {
    /// The format from the file's first bytes (its magic number).
    pub fn sniff(bytes: &[u8]) -> Result<Format, ImageError> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Ok(Format::Png)
        } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
            Ok(Format::Jpeg)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Ok(Format::WebP)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Ok(Format::Gif)
        } else if bytes.is_empty() {
            Err(ImageError::Malformed("the file is empty".into()))
        } else {
            Err(ImageError::Unsupported(
                "(the file's first bytes are none of PNG, JPEG, WebP or GIF)".into(),
            ))
        }
    }

    /// The format a MIME type names (`image/jpg` too).
    pub fn from_mime(mime: &str) -> Result<Format, ImageError> {
        match mime.to_ascii_lowercase().as_str() {
            "image/png" => Ok(Format::Png),
            "image/jpeg" | "image/jpg" => Ok(Format::Jpeg),
            "image/webp" => Ok(Format::WebP),
            "image/gif" => Ok(Format::Gif),
            other => Err(ImageError::Unsupported(other.to_string())),
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
            Format::WebP => "image/webp",
            Format::Gif => "image/gif",
        }
    }

    /// The usual file extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Jpeg => "jpg",
            Format::WebP => "webp",
            Format::Gif => "gif",
        }
    }
}

/// Refuses dimensions over the limits, or of zero.
fn check_size(width: u32, height: u32) -> Result<(), ImageError> {
    if width == 0 || height == 0 {
        return Err(ImageError::Malformed(format!("{width}x{height} pixels")));
    }
    if width > MAX_SIDE || height > MAX_SIDE || u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(ImageError::TooLarge(format!(
            "{width}x{height} pixels, at most {MAX_SIDE} a side and {MAX_PIXELS} in all"
        )));
    }
    Ok(())
}

/// The bytes of an RGB(A) buffer this size, after [`check_size`].
fn buffer_len(width: u32, height: u32, channels: usize) -> usize {
    width as usize * height as usize * channels
}

/// Decodes `bytes` (of `format`) to RGB.
pub fn decode(format: Format, bytes: &[u8]) -> Result<Rgb, ImageError> {
    match format {
        Format::Png => png_rgb(bytes),
        Format::Jpeg => jpeg_rgb(bytes),
        Format::WebP => webp_rgb(bytes),
        Format::Gif => gif_rgb(bytes),
    }
}

fn malformed(e: impl std::fmt::Display) -> ImageError {
    ImageError::Malformed(e.to_string())
}

fn png_rgb(bytes: &[u8]) -> Result<Rgb, ImageError> {
    // The decoder's own allocation cap: the largest RGBA buffer the limits allow.
    let limits = png::Limits {
        bytes: MAX_PIXELS as usize * 4 + (1 << 20),
    };
    let mut decoder = png::Decoder::new_with_limits(Cursor::new(bytes), limits);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| match e {
        png::DecodingError::LimitsExceeded => {
            ImageError::TooLarge("over the decoder's memory limit".into())
        }
        e => malformed(e),
    })?;
    let (width, height) = reader.info().size();
    check_size(width, height)?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| ImageError::TooLarge("the decoded size overflows".into()))?;
    let mut buf = vec![0; size];
    let frame = reader.next_frame(&mut buf).map_err(malformed)?;
    buf.truncate(frame.buffer_size());
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            return Err(ImageError::Malformed("an unexpanded palette".into()))
        }
    };
    let line = frame.line_size;
    let mut data = Vec::with_capacity(buffer_len(width, height, 3));
    for row in buf.chunks(line).take(height as usize) {
        for px in row[..width as usize * channels].chunks_exact(channels) {
            match channels {
                1 | 2 => data.extend_from_slice(&[px[0], px[0], px[0]]),
                _ => data.extend_from_slice(&px[..3]),
            }
        }
    }
    Ok(Rgb {
        width,
        height,
        data,
    })
}

fn jpeg_rgb(bytes: &[u8]) -> Result<Rgb, ImageError> {
    use zune_jpeg::zune_core::{bytestream::ZCursor, colorspace::ColorSpace, options};
    let options = options::DecoderOptions::default()
        .set_max_width(MAX_SIDE as usize)
        .set_max_height(MAX_SIDE as usize)
        .jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(malformed)?;
    let info = decoder
        .info()
        .ok_or_else(|| ImageError::Malformed("no JPEG header".into()))?;
    let (width, height) = (u32::from(info.width), u32::from(info.height));
    check_size(width, height)?;
    let data = decoder.decode().map_err(malformed)?;
    if data.len() != buffer_len(width, height, 3) {
        return Err(ImageError::Malformed("a short JPEG scan".into()));
    }
    Ok(Rgb {
        width,
        height,
        data,
    })
}

fn webp_rgb(bytes: &[u8]) -> Result<Rgb, ImageError> {
    let mut decoder = image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(malformed)?;
    let (width, height) = decoder.dimensions();
    check_size(width, height)?;
    let channels = if decoder.has_alpha() { 4 } else { 3 };
    let mut buf = vec![0; buffer_len(width, height, channels)];
    if decoder.is_animated() {
        decoder.read_frame(&mut buf).map_err(malformed)?;
    } else {
        decoder.read_image(&mut buf).map_err(malformed)?;
    }
    let data = if channels == 4 {
        buf.chunks_exact(4)
            .flat_map(|px| [px[0], px[1], px[2]])
            .collect()
    } else {
        buf
    };
    Ok(Rgb {
        width,
        height,
        data,
    })
}

/// How many frames a GIF holds, counted by walking its blocks without decoding
/// any: the header, the global colour table, then extensions and images, each
/// a run of sub-blocks, to the trailer. `None` where the structure breaks.
fn gif_frames(bytes: &[u8]) -> Option<usize> {
    // The sub-blocks from `at` to their empty terminator: the offset after it.
    let skip_blocks = |mut at: usize| -> Option<usize> {
        loop {
            let len = usize::from(*bytes.get(at)?);
            at += 1 + len;
            if len == 0 {
                return Some(at);
            }
        }
    };
    let table = |flags: u8| {
        if flags & 0x80 != 0 {
            3 << ((flags & 7) + 1)
        } else {
            0
        }
    };
    let mut at = 13 + table(*bytes.get(10)?);
    let mut frames = 0;
    loop {
        match *bytes.get(at)? {
            0x21 => at = skip_blocks(at + 2)?,
            0x2c => {
                frames += 1;
                if frames > MAX_GIF_FRAMES {
                    return Some(frames);
                }
                // The descriptor, its local table, the LZW code size, the data.
                at = skip_blocks(at + 10 + table(*bytes.get(at + 9)?) + 1)?;
            }
            0x3b => return Some(frames),
            _ => return None,
        }
    }
}

fn gif_rgb(bytes: &[u8]) -> Result<Rgb, ImageError> {
    if let Some(frames) = gif_frames(bytes).filter(|&n| n > MAX_GIF_FRAMES) {
        return Err(ImageError::TooLarge(format!(
            "a GIF of more than {MAX_GIF_FRAMES} frames ({frames} counted so far)"
        )));
    }
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::RGBA);
    options.set_memory_limit(gif::MemoryLimit::Bytes(
        std::num::NonZeroU64::new(MAX_PIXELS * 4).expect("non-zero"),
    ));
    let mut decoder = options.read_info(Cursor::new(bytes)).map_err(malformed)?;
    let (width, height) = (u32::from(decoder.width()), u32::from(decoder.height()));
    check_size(width, height)?;
    // The first frame, drawn on the logical screen at its offset.
    let frame = decoder
        .read_next_frame()
        .map_err(malformed)?
        .ok_or_else(|| ImageError::Malformed("a GIF without frames".into()))?;
    let mut data = vec![0; buffer_len(width, height, 3)];
    let (fw, fh) = (usize::from(frame.width), usize::from(frame.height));
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    for y in 0..fh {
        let sy = top + y;
        if sy >= height as usize {
            break;
        }
        for x in 0..fw {
            let sx = left + x;
            if sx >= width as usize {
                break;
            }
            let Some(px) = frame.buffer.get((y * fw + x) * 4..(y * fw + x) * 4 + 4) else {
                return Err(ImageError::Malformed("a short GIF frame".into()));
            };
            let at = (sy * width as usize + sx) * 3;
            data[at..at + 3].copy_from_slice(&px[..3]);
        }
    }
    Ok(Rgb {
        width,
        height,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GIF of `frames` one-pixel frames, written byte by byte.
    pub(crate) fn gif(frames: usize) -> Vec<u8> {
        let mut out = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff".to_vec();
        for _ in 0..frames {
            // One pixel of colour 0: clear, 0, end (LZW, 3-bit codes).
            out.extend_from_slice(b"\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00");
        }
        out.push(0x3b);
        out
    }

    #[test]
    fn a_gif_gives_its_first_frame_and_one_of_thousands_of_frames_is_refused() {
        let rgb = decode(Format::Gif, &gif(3)).unwrap();
        assert_eq!((rgb.width, rgb.height, rgb.data), (1, 1, vec![0, 0, 0]));
        assert_eq!(gif_frames(&gif(MAX_GIF_FRAMES)), Some(MAX_GIF_FRAMES));
        let many = decode(Format::Gif, &gif(10_000));
        assert!(
            matches!(many, Err(ImageError::TooLarge(_))),
            "{:?}",
            many.err()
        );
    }

    #[test]
    fn a_huge_header_over_a_tiny_body_is_refused_before_any_allocation() {
        // A PNG that claims 10,000 x 10,000 pixels: its IHDR, then nothing.
        let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        png.extend_from_slice(&10_000u32.to_be_bytes());
        png.extend_from_slice(&10_000u32.to_be_bytes());
        png.extend_from_slice(&[8, 2, 0, 0, 0]);
        let crc = png_crc(&png[12..]);
        png.extend_from_slice(&crc.to_be_bytes());
        // A first data chunk of a few bytes, as a hostile file would send.
        png.extend_from_slice(b"\x00\x00\x00\x08IDATx\x9c\x03\x00\x00\x00\x00\x01");
        let crc = png_crc(&png[png.len() - 12..]);
        png.extend_from_slice(&crc.to_be_bytes());
        let refused = decode(Format::Png, &png);
        assert!(
            matches!(refused, Err(ImageError::TooLarge(_))),
            "{:?}",
            refused.err()
        );
        // A JPEG cut after its first marker.
        let jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01".to_vec();
        assert!(matches!(
            decode(Format::Jpeg, &jpeg),
            Err(ImageError::Malformed(_))
        ));
    }

    /// The CRC-32 of a PNG chunk (type and data).
    fn png_crc(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
