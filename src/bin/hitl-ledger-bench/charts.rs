//! The two PNG charts of a run: throughput against ledger size (batched appends and `verify`
//! beside the RocksDB and SHA-256 limits) and against concurrent HTTP clients (the durable
//! server, the same with sync off, `GET /healthz`, beside the fdatasync loop). Drawn with
//! `plotters` into an RGB buffer, text in DejaVu Sans (embedded, so no system font is
//! needed), encoded with `png`.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::BoxResult;
use crate::http::{ServerKind, Target};
use crate::report::{Results, thousands};

/// The file of the chart against ledger size.
pub const BY_SIZE: &str = "throughput-vs-ledger-size.png";
/// The file of the chart against concurrent clients.
pub const BY_CLIENTS: &str = "throughput-vs-clients.png";

const W: u32 = 1100;
const H: u32 = 640;
const FONT: &str = "sans-serif";

/// Writes both charts into `out`.
pub fn write_all(r: &Results, out: &Path) -> BoxResult<()> {
    register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded DejaVu Sans font does not load")?;
    write_png(&out.join(BY_SIZE), |buf| by_size(r, buf))?;
    write_png(&out.join(BY_CLIENTS), |buf| by_clients(r, buf))?;
    Ok(())
}

fn write_png(path: &Path, draw: impl FnOnce(&mut [u8]) -> BoxResult<()>) -> BoxResult<()> {
    let mut buf = vec![0u8; (W * H * 3) as usize];
    draw(&mut buf)?;
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), W, H);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header()?;
    w.write_image_data(&buf)?;
    w.finish()?;
    Ok(())
}

fn err(e: impl std::fmt::Display) -> crate::BoxError {
    format!("drawing a chart: {e}").into()
}

/// A log axis range that holds every value with some room.
fn log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return 1.0..10.0;
    }
    (lo / 2.0)..(hi * 2.0)
}

fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{}M", trim(x / 1e6))
    } else if x >= 1e3 {
        format!("{}k", trim(x / 1e3))
    } else {
        trim(x)
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

fn by_size(r: &Results, buf: &mut [u8]) -> BoxResult<()> {
    let append: Vec<(f64, f64)> = r
        .build
        .stages
        .iter()
        .map(|s| (s.to as f64, s.records_per_s))
        .collect();
    // The verify after the HTTP phases is left out: that ledger holds a checkpoint per HTTP
    // batch, so it is not the same data as the other points (its row is in the tables).
    let mut verify: Vec<(f64, f64)> = r
        .verify
        .iter()
        .map(|v| (v.size as f64, v.records_per_s))
        .collect();
    verify.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rocks = r.limits.rocksdb.per_s;
    let sha = r.limits.sha256.leaves_per_s;
    let xs = log_range(append.iter().chain(&verify).map(|p| p.0));
    let ys = log_range(
        append
            .iter()
            .chain(&verify)
            .map(|p| p.1)
            .chain([rocks, sha]),
    );

    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Throughput against ledger size ({} mode, {})",
                r.mode, r.profile
            ),
            (FONT, 24),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(xs.clone().log_scale(), ys.log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("records in the ledger")
        .y_desc("records per second")
        .x_label_formatter(&|x| si(*x))
        .y_label_formatter(&|y| si(*y))
        .label_style((FONT, 15))
        .draw()
        .map_err(err)?;
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(255, 127, 14);
    let green = RGBColor(44, 160, 44);
    let red = RGBColor(214, 39, 40);
    chart
        .draw_series(LineSeries::new(append.clone(), blue.stroke_width(2)))
        .map_err(err)?
        .label("append --batch 1000 (each stage, at the size it ends at)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], blue.stroke_width(2)));
    chart
        .draw_series(append.iter().map(|p| Circle::new(*p, 4, blue.filled())))
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(verify.clone(), orange.stroke_width(2)))
        .map_err(err)?
        .label("verify (whole ledger, both cores)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], orange.stroke_width(2)));
    chart
        .draw_series(verify.iter().map(|p| Circle::new(*p, 4, orange.filled())))
        .map_err(err)?;
    for (value, color, label) in [
        (
            rocks,
            green,
            format!(
                "limit: RocksDB synced batches of 1000 puts, same leaves ({}/s)",
                thousands(rocks)
            ),
        ),
        (
            sha,
            red,
            format!(
                "limit: SHA-256 leaf hash, one core, same leaves ({}/s)",
                thousands(sha)
            ),
        ),
    ] {
        chart
            .draw_series(DashedLineSeries::new(
                [(xs.start, value), (xs.end, value)],
                8,
                6,
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn by_clients(r: &Results, buf: &mut [u8]) -> BoxResult<()> {
    let series = |server: ServerKind, target: Target| -> Vec<(f64, f64)> {
        // x is log2 of the clients, so 1, 2, 4 … 64 are evenly spaced and labelled.
        let mut v: Vec<(f64, f64)> = r
            .http
            .iter()
            .filter(|l| l.server == server && l.target == target)
            .map(|l| ((l.clients as f64).log2(), l.per_s))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let durable = series(ServerKind::Durable, Target::Interrupts);
    let sync_off = series(ServerKind::SyncOff, Target::Interrupts);
    let healthz = series(ServerKind::Durable, Target::Healthz);
    let binary = series(ServerKind::Binary, Target::Interrupts);
    let fsync = r.limits.fdatasync.per_s;
    let all = || {
        durable
            .iter()
            .chain(&sync_off)
            .chain(&healthz)
            .chain(&binary)
    };
    let x_max = all().map(|p| p.0).fold(1.0, f64::max);
    let xs = -0.3..(x_max + 0.3);
    let y_max = all().map(|p| p.1).chain([fsync]).fold(1.0, f64::max) * 1.1;

    let root = BitMapBackend::with_buffer(buf, (W, H)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "HTTP answers per second against concurrent clients ({} mode, {})",
                r.mode, r.profile
            ),
            (FONT, 24),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(xs.clone(), 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("concurrent keep-alive connections")
        .y_desc("answers per second")
        .x_labels(x_max as usize + 2)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                trim(x.exp2())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| si(*y))
        .label_style((FONT, 15))
        .draw()
        .map_err(err)?;
    let lines = [
        (
            durable,
            RGBColor(31, 119, 180),
            "POST /v1/interrupts, durable (fsync per batch)",
        ),
        (
            sync_off,
            RGBColor(255, 127, 14),
            "POST /v1/interrupts, same server with sync off",
        ),
        (
            healthz,
            RGBColor(148, 103, 189),
            "GET /healthz, same server (HTTP floor)",
        ),
        (
            binary,
            RGBColor(140, 86, 75),
            "POST /v1/interrupts, the `hitl-ledger serve` binary (same build)",
        ),
    ];
    for (points, color, label) in lines {
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
            .map_err(err)?;
    }
    let red = RGBColor(214, 39, 40);
    chart
        .draw_series(DashedLineSeries::new(
            [(xs.start, fsync), (xs.end, fsync)],
            8,
            6,
            red.stroke_width(2),
        ))
        .map_err(err)?
        .label(format!(
            "limit: one 512 B write + fdatasync at a time ({}/s)",
            thousands(fsync)
        ))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], red.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
