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
//! moves each into a network namespace and gives it a point-to-point address. One thread
//! carries both directions: it waits in `poll` until a device has packets or the oldest
//! held packet is due, reads all there are (each stamped with the time it was read), and
//! writes all that are due. A wake-up ends late (by tens of µs in a VM, timer slack lowered
//! to 1 µs): the line aims that much early, by a running average of its late wake-ups, so
//! that packets are held the delay on average rather than the delay plus the wake-up. Run
//! it under `chrt -f` so that its wake-ups do not wait behind the load for a CPU, as
//! netem's timers, which fire in softirq context, do not.
//!
//! Every second it prints, per direction, what it has carried so far: `STATS a>b
//! packets=N held_p50_us=.. held_p99_us=.. held_p999_us=.. held_max_us=.. errors=N`, where
//! *held* is from reading a packet to having written it. It exits by itself after
//! `--seconds`.
//!
//! The one `unsafe` block is the `TUNSETIFF` ioctl that attaches a file to a device.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::num::NonZeroU64;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rustix::event::{PollFd, PollFlags, Timespec, poll};

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
        .custom_flags(libc::O_NONBLOCK)
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

/// A packet waiting to be written: when it was read, and its bytes.
struct Packet {
    read: Instant,
    bytes: Vec<u8>,
}

/// One direction: the packets read from `from` and not yet written to `to`, oldest first.
struct Direction {
    from: Arc<File>,
    to: Arc<File>,
    queue: VecDeque<Packet>,
    held: Arc<Held>,
}

impl Direction {
    /// Reads every packet `from` has now, each stamped `now`. `Err` ends the line.
    fn read_all(
        &mut self,
        now: Instant,
        scratch: &mut [u8],
        spare: &mut Vec<Vec<u8>>,
    ) -> io::Result<()> {
        loop {
            match (&*self.from).read(scratch) {
                Ok(n) => {
                    let mut bytes = spare.pop().unwrap_or_default();
                    bytes.clear();
                    bytes.extend_from_slice(&scratch[..n]);
                    self.queue.push_back(Packet { read: now, bytes });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes, in order, every packet due by `now` (held `delay` less `early`).
    fn write_due(&mut self, delay: Duration, early: Duration, spare: &mut Vec<Vec<u8>>) {
        while let Some(packet) = self.queue.front() {
            if packet.read + (delay - early) > clock() {
                return;
            }
            let packet = self.queue.pop_front().expect("front was Some");
            // A device not up yet, or a full queue: the packet is lost, as on a wire.
            if (&*self.to).write(&packet.bytes).is_err() {
                self.held.errors.fetch_add(1, Ordering::Relaxed);
            }
            self.held
                .record(clock().saturating_duration_since(packet.read));
            spare.push(packet.bytes);
        }
    }

    /// When the oldest packet is due, aiming `early`.
    fn next_due(&self, delay: Duration, early: Duration) -> Option<Instant> {
        self.queue.front().map(|p| p.read + (delay - early))
    }
}

/// Carries both directions in one thread: it waits in `poll` until a device has a packet or
/// the oldest held one is due, reads everything there is, and writes everything due. One
/// thread, not a reader and a writer per direction, so that a packet costs one wake-up to
/// read and at most one to write, with no hand-over between threads: the line's own CPU is
/// part of what the benchmark measures, and netem, which it stands in for, costs little.
/// Returns only on an error reading a device or waiting.
fn carry(mut directions: [Direction; 2], delay: Duration) -> io::Error {
    fine_timer();
    let mut scratch = vec![0u8; 65_536];
    let mut spare: Vec<Vec<u8>> = Vec::new();
    // A running average (1/8 weight) of how late the wake-ups for due packets were, at most
    // half the delay: the line aims that much early.
    let mut early = Duration::ZERO;
    loop {
        let due = directions
            .iter()
            .filter_map(|d| d.next_due(delay, early))
            .min();
        let timeout = due.map(|due| {
            Timespec::try_from(due.saturating_duration_since(clock())).expect("a delay fits")
        });
        let mut fds = [
            PollFd::new(&directions[0].from, PollFlags::IN),
            PollFd::new(&directions[1].from, PollFlags::IN),
        ];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return io::Error::other(format!("poll: {e}")),
        }
        let now = clock();
        if let Some(due) = due.filter(|due| *due <= now) {
            let late = now.saturating_duration_since(due).min(delay / 2);
            early = (early * 7 + late) / 8;
        }
        for direction in &mut directions {
            if let Err(e) = direction.read_all(now, &mut scratch, &mut spare) {
                return io::Error::other(format!("read: {e}"));
            }
            direction.write_due(delay, early, &mut spare);
        }
    }
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
    let (a_to_b, b_to_a) = (Arc::new(Held::new()), Arc::new(Held::new()));
    let directions = [
        Direction {
            from: Arc::clone(&a),
            to: Arc::clone(&b),
            queue: VecDeque::new(),
            held: Arc::clone(&a_to_b),
        },
        Direction {
            from: b,
            to: a,
            queue: VecDeque::new(),
            held: Arc::clone(&b_to_a),
        },
    ];
    // A line that cannot carry exits, so that the links vanish and the benchmark fails
    // rather than measuring a network that drops everything.
    std::thread::spawn(move || {
        eprintln!("delay_line: {}", carry(directions, delay));
        std::process::exit(1);
    });
    println!("ready");
    let mut out = io::stdout().lock();
    for _ in 0..args.seconds {
        std::thread::sleep(Duration::from_secs(1));
        let _ = writeln!(out, "STATS a>b {}", a_to_b.summary());
        let _ = writeln!(out, "STATS b>a {}", b_to_a.summary());
        let _ = out.flush();
    }
    // The devices go with the process; the carrying thread is left waiting in poll.
    std::process::ExitCode::SUCCESS
}
