//! A network delay for benchmarks (used by `benches/redis_latency.sh`): two TUN devices,
//! and every IP packet that enters one leaves the other `--delay-us` later, in order.
//!
//! It stands in for `tc qdisc … netem delay`, which the kernel of this project's machines
//! lacks (`CONFIG_NET_SCH_NETEM` is not set, and there are no modules). Like netem it holds
//! packets, not a byte stream: TCP on both ends sees the round trip (ACKs, Nagle's
//! algorithm and the window all wait for it), which a proxy relaying bytes would hide.
//!
//! ```text
//! chrt -f 10 delay_line --a dl-a --b dl-b --delay-us 250 --seconds 600
//! ```
//!
//! It makes both devices (they vanish when it exits) and prints `ready`; the caller then
//! moves each into a network namespace and gives it a point-to-point address. Per direction
//! one thread reads packets and queues each with the time it was read, and another sleeps
//! until the oldest is due and writes it to the other device. A sleep ends late
//! (by about 40 µs in a VM, timer slack lowered to 1 µs): the writer aims that much early,
//! by a running average of its oversleeps, so that packets are held the delay on average
//! rather than the delay plus the wake-up. Run it under `chrt -f` so that its wake-ups do
//! not wait behind the load for a CPU, as netem's timers, which fire in softirq context,
//! do not.
//!
//! Every second it prints, per direction, what it has carried so far: `STATS a>b
//! packets=N held_p50_us=.. held_p99_us=.. held_p999_us=.. held_max_us=.. errors=N`, where
//! *held* is from reading a packet to having written it. It exits by itself after
//! `--seconds`.
//!
//! The one `unsafe` block is the `TUNSETIFF` ioctl that attaches a file to a device.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::num::NonZeroU64;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use clap::Parser;

/// Hold times are counted in 1 µs buckets up to this many µs; longer ones share the last.
const BUCKETS: usize = 2000;

#[derive(Parser, Debug)]
#[command(about = "Two TUN devices; each packet entering one leaves the other a fixed delay later")]
struct Args {
    /// Name of the first device (at most 15 bytes).
    #[arg(long)]
    a: String,
    /// Name of the second device.
    #[arg(long)]
    b: String,
    /// Delay each way, in µs.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    delay_us: u64,
    /// Exit after this many seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
}

/// How long one direction's packets were held, and how many could not be written.
struct Held {
    /// Packets by hold time in whole µs; the last bucket holds all longer ones.
    buckets: Vec<AtomicU64>,
    max_ns: AtomicU64,
    errors: AtomicU64,
}

impl Held {
    fn new() -> Self {
        Self {
            buckets: (0..=BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_ns: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    fn record(&self, held: Duration) {
        let ns = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        let bucket = usize::try_from(ns / 1000).map_or(BUCKETS, |us| us.min(BUCKETS));
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// The STATS line's fields.
    fn summary(&self) -> String {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        // The upper edge of the bucket holding quantile q, in µs.
        let quantile = |q: f64| {
            let rank = (q * total as f64).ceil() as u64;
            let mut seen = 0;
            for (us, n) in counts.iter().enumerate() {
                seen += n;
                if seen >= rank.max(1) {
                    return us + 1;
                }
            }
            0
        };
        format!(
            "packets={total} held_p50_us={} held_p99_us={} held_p999_us={} held_max_us={:.1} errors={}",
            quantile(0.5),
            quantile(0.99),
            quantile(0.999),
            self.max_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            self.errors.load(Ordering::Relaxed)
        )
    }
}

/// The OS clock: the delay is real time.
#[allow(clippy::disallowed_methods)] // the one place here that reads the OS clock
fn clock() -> Instant {
    Instant::now()
}

/// Makes the TUN device `name` (IP packets, no extra header) and attaches a file to it.
fn open_tun(name: &str) -> io::Result<File> {
    /// `struct ifreq` as TUNSETIFF reads it: the name, then the flags at the start of a
    /// 24-byte union (40 bytes in all on Linux).
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        rest: [u8; 22],
    }
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("device name {name:?}: 1 to 15 bytes"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        rest: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: the fd is open for the whole call, and TUNSETIFF reads and writes one
    // `struct ifreq`, which `req` is laid out as and outlives the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &raw mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Best effort: a thread that cannot lower its slack still works, only less precisely.
fn fine_timer() {
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1000));
}

/// Reads packets from `from` and queues each with the time it was read.
fn receive(from: &File, queue: &Sender<(Instant, Vec<u8>)>) {
    fine_timer();
    let mut buf = vec![0u8; 65_536];
    loop {
        match (&mut &*from).read(&mut buf) {
            Ok(n) => {
                if queue.send((clock(), buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("delay_line: read: {e}");
                return;
            }
        }
    }
}

/// Writes each queued packet to `to` once it is due, aiming early by the usual oversleep.
fn send(to: &File, queue: &Receiver<(Instant, Vec<u8>)>, delay: Duration, held: &Held) {
    fine_timer();
    // A running average (1/8 weight) of how long sleeps overran, at most half the delay.
    let mut oversleep = Duration::ZERO;
    for (read, packet) in queue {
        let wake = read + (delay - oversleep);
        let now = clock();
        if wake > now {
            std::thread::sleep(wake - now);
            let overran = clock().saturating_duration_since(wake).min(delay / 2);
            oversleep = (oversleep * 7 + overran) / 8;
        }
        // A device not up yet, or a full queue: the packet is lost, as on a wire.
        if (&mut &*to).write(&packet).is_err() {
            held.errors.fetch_add(1, Ordering::Relaxed);
        }
        held.record(clock().saturating_duration_since(read));
    }
}

/// One direction: a reader and a writer thread (with no delay too, so that a line of 0 µs
/// costs what a delayed one does), and what the writer measures.
fn direction(from: Arc<File>, to: Arc<File>, delay: Duration) -> Arc<Held> {
    let held = Arc::new(Held::new());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || receive(&from, &tx));
    let stats = Arc::clone(&held);
    std::thread::spawn(move || send(&to, &rx, delay, &stats));
    held
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let open = |name: &str| {
        open_tun(name).map(Arc::new).map_err(|e| {
            eprintln!("delay_line: TUN device {name}: {e} (needs root and /dev/net/tun)");
        })
    };
    let (Ok(a), Ok(b)) = (open(&args.a), open(&args.b)) else {
        return std::process::ExitCode::FAILURE;
    };
    let delay = Duration::from_micros(args.delay_us);
    let a_to_b = direction(Arc::clone(&a), Arc::clone(&b), delay);
    let b_to_a = direction(b, a, delay);
    println!("ready");
    let mut out = io::stdout().lock();
    for _ in 0..args.seconds {
        std::thread::sleep(Duration::from_secs(1));
        let _ = writeln!(out, "STATS a>b {}", a_to_b.summary());
        let _ = writeln!(out, "STATS b>a {}", b_to_a.summary());
        let _ = out.flush();
    }
    // The devices go with the process; the threads are left blocked in read.
    std::process::ExitCode::SUCCESS
}
