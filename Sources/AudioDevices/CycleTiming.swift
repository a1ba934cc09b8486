import AudioCore
import CSystemCalls
import Synchronization

/// One device cycle as the real-time thread saw it.
public struct CycleTiming: Hashable, Sendable {
    /// CLOCK_MONOTONIC, in nanoseconds, when the device called the cycle.
    public var start: UInt64
    /// Nanoseconds the cycle took: capture handler, input node, graph (or output callback), format conversion.
    public var duration: UInt64
    /// The cycle's sample time (continues across reconnects, jumping by the gap).
    public var sampleTime: Int64
    /// Frames the cycle moved.
    public var frames: Int
    /// Nanoseconds of CPU the real-time thread itself used in the cycle, user and system (its
    /// `CLOCK_THREAD_CPUTIME_ID`), at most `duration` (give or take the 0.05 % NTP may slew the wall clock by): less
    /// by the time the thread was off its CPU, preempted, blocked, or its virtual CPU not run by the host. Two things
    /// the kernel may charge to the thread anyway: time the host took, unless the hypervisor reports it as steal time
    /// and the kernel accounts for it (KVM and Xen with `CONFIG_PARAVIRT_TIME_ACCOUNTING`), and interrupts handled
    /// while it ran, on a kernel without `CONFIG_IRQ_TIME_ACCOUNTING`.
    public var cpuTime: UInt64
    /// Times the thread gave up its CPU in the cycle waiting for something (a lock, I/O, a page from disk): none is
    /// the real-time rule. (A `sched_yield` counts as involuntary; a spin counts as neither.)
    public var voluntarySwitches: Int
    /// Times the thread was taken off its CPU in the cycle for another thread.
    public var involuntarySwitches: Int
    /// Page faults the thread took in the cycle: memory it touched for the first time (the kernel maps and clears
    /// a page, or a 2 MiB huge page, on the thread's CPU time) or that had to be read in. None after the warm-up is
    /// the real-time rule.
    public var pageFaults: Int
    /// Whether the four above were measured (false where the system cannot say: then they are 0).
    public var usageMeasured: Bool

    /// A cycle's timing from its parts; the thread usage defaults to not measured (all 0).
    /// - Parameters:
    ///   - start: CLOCK_MONOTONIC nanoseconds when the device called the cycle.
    ///   - duration: nanoseconds the cycle took.
    ///   - sampleTime: the cycle's sample time.
    ///   - frames: frames the cycle moved.
    ///   - cpuTime: nanoseconds of CPU the real-time thread used in the cycle.
    ///   - voluntarySwitches: times the thread gave up its CPU in the cycle waiting for something.
    ///   - involuntarySwitches: times the thread was taken off its CPU in the cycle for another thread.
    ///   - pageFaults: page faults the thread took in the cycle.
    ///   - usageMeasured: whether the four above were measured.
    public init(start: UInt64, duration: UInt64, sampleTime: Int64, frames: Int, cpuTime: UInt64 = 0,
                voluntarySwitches: Int = 0, involuntarySwitches: Int = 0, pageFaults: Int = 0, usageMeasured: Bool = false) {
        self.start = start
        self.duration = duration
        self.sampleTime = sampleTime
        self.frames = frames
        self.cpuTime = cpuTime
        self.voluntarySwitches = voluntarySwitches
        self.involuntarySwitches = involuntarySwitches
        self.pageFaults = pageFaults
        self.usageMeasured = usageMeasured
    }
}

/// A thread's use of the machine up to a moment (see ``CycleTiming``).
struct ThreadUsage {
    var cpuTime: UInt64
    var voluntarySwitches: Int
    var involuntarySwitches: Int
    var pageFaults: Int

    /// The calling thread's, now, or nil where the system cannot say. Two system calls, neither of which waits.
    @inline(__always)
    static func current() -> ThreadUsage? {
        var cpu: Int64 = 0
        var voluntary: Int64 = 0
        var involuntary: Int64 = 0
        var faults: Int64 = 0
        guard la_thread_usage(&cpu, &voluntary, &involuntary, &faults) == 0, cpu >= 0 else { return nil }
        return ThreadUsage(
            cpuTime: UInt64(cpu), voluntarySwitches: Int(voluntary), involuntarySwitches: Int(involuntary), pageFaults: Int(faults))
    }
}

/// Nearest-rank percentiles of a set of measurements.
public struct Percentiles: Hashable, Sendable {
    /// How many measurements there were.
    public var count: Int
    /// The median (50th percentile); 0 when there were none.
    public var p50: Double
    /// The 99th percentile; 0 when there were none.
    public var p99: Double
    /// The 99.99th percentile; 0 when there were none.
    public var p9999: Double
    /// The largest measurement; 0 when there were none.
    public var max: Double

    /// The percentiles of `values` (all zero when empty).
    public init(_ values: [Double]) {
        let sorted = values.sorted()
        count = sorted.count
        func rank(_ p: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            // Nearest rank: the smallest value with at least p of the values at or below it.
            let index = Int((p * Double(sorted.count)).rounded(.up)) - 1
            return sorted[Swift.max(0, Swift.min(sorted.count - 1, index))]
        }
        p50 = rank(0.5)
        p99 = rank(0.99)
        p9999 = rank(0.9999)
        max = sorted.last ?? 0
    }
}

/// What a run's cycle timings say: how long each cycle took, and how regularly the device called it.
///
/// *Render time* is the time spent inside the cycle; *CPU time* the part of it the thread ran (the rest it was
/// off its CPU). *Callback jitter* is how far each interval between two consecutive cycles' starts strays from the
/// audio it stands for (the earlier cycle's frames at the sample rate), in absolute value; intervals across a
/// reconnect are left out. *Load* is render time over the cycle's own duration of audio: above 1 the cycle cannot
/// keep up. Cycles *blocked* gave up their CPU waiting for something, which a real-time thread must not do;
/// cycles *preempted* were taken off it for another thread.
public struct CycleTimingSummary: Hashable, Sendable, CustomStringConvertible {
    /// How many cycles were recorded.
    public var cycles: Int
    /// The sample rate the cycles ran at, in Hz (what their frames are measured in).
    public var sampleRate: Double
    /// Render time per cycle, microseconds.
    public var renderMicroseconds: Percentiles
    /// Callback jitter, microseconds.
    public var jitterMicroseconds: Percentiles
    /// Render time over the cycle's audio duration (0…1 keeps up).
    public var load: Percentiles
    /// CPU time per cycle, microseconds (of the cycles it was measured in).
    public var cpuMicroseconds: Percentiles
    /// Cycles with a voluntary context switch (blocked).
    public var blockedCycles: Int
    /// Cycles with an involuntary context switch (preempted).
    public var preemptedCycles: Int
    /// Cycles after the first that took a page fault (memory touched for the first time on the device's thread; the
    /// first cycle maps in the thread's stack and code).
    public var faultedCycles: Int
    /// The most common cycle size, frames (the largest of equally common ones).
    public var typicalFrames: Int

    /// Summarizes `timings` (as ``IOUnit/cycleTimings`` gives them, in order) of cycles that ran at `sampleRate` Hz.
    public init(_ timings: [CycleTiming], sampleRate: Double) {
        cycles = timings.count
        self.sampleRate = sampleRate
        renderMicroseconds = Percentiles(timings.map { Double($0.duration) / 1000 })
        cpuMicroseconds = Percentiles(timings.filter(\.usageMeasured).map { Double($0.cpuTime) / 1000 })
        blockedCycles = timings.count(where: { $0.voluntarySwitches > 0 })
        preemptedCycles = timings.count(where: { $0.involuntarySwitches > 0 })
        faultedCycles = timings.dropFirst().count(where: { $0.pageFaults > 0 })
        load = Percentiles(
            timings.filter { $0.frames > 0 }.map { Double($0.duration) / 1e9 / (Double($0.frames) / sampleRate) })
        var deviations: [Double] = []
        deviations.reserveCapacity(timings.count)
        for (a, b) in zip(timings, timings.dropFirst()) where b.sampleTime == a.sampleTime + Int64(a.frames) {
            let interval = Double(b.start) - Double(a.start)
            deviations.append(abs(interval - Double(a.frames) * 1e9 / sampleRate) / 1000)
        }
        jitterMicroseconds = Percentiles(deviations)
        var counts: [Int: Int] = [:]
        for t in timings { counts[t.frames, default: 0] += 1 }
        typicalFrames = counts.max { $0.value < $1.value || ($0.value == $1.value && $0.key < $1.key) }?.key ?? 0
    }

    public var description: String {
        func row(_ p: Percentiles) -> String {
            "p50 \(String(format2: p.p50)), p99 \(String(format2: p.p99)), "
                + "p99.99 \(String(format2: p.p9999)), max \(String(format2: p.max)) µs"
        }
        return "\(cycles) cycles of \(typicalFrames) frames (\(String(format2: Double(typicalFrames) * 1000 / sampleRate)) ms): "
            + "render \(row(renderMicroseconds)); callback jitter \(row(jitterMicroseconds)); "
            + "load p99 \(String(format2: load.p99 * 100)) %; "
            + "CPU p50 \(String(format2: cpuMicroseconds.p50)), p99 \(String(format2: cpuMicroseconds.p99)), "
            + "max \(String(format2: cpuMicroseconds.max)) µs; cycles blocked \(blockedCycles), preempted \(preemptedCycles), "
            + "faulted \(faultedCycles)"
    }
}

/// Per-cycle timings recorded on the real-time thread into storage allocated before the start: one writer that
/// fills a record and then publishes the count, readers that copy what was published. Full, it stops recording.
final class CycleTimingRecorder: @unchecked Sendable {
    // Unchecked Sendable: one writer fills `records[n]`, then publishes `published` (releasing); readers copy below the acquired count
    let capacity: Int
    private let records: UnsafeMutablePointer<CycleTiming>
    private let published = Atomic<Int>(0)

    init(capacity: Int) {
        self.capacity = capacity
        records = .allocate(capacity: Swift.max(1, capacity))
        // Written here, so that the real-time thread does not take the storage's first page faults.
        records.initialize(repeating: CycleTiming(start: 0, duration: 0, sampleTime: 0, frames: 0), count: Swift.max(1, capacity))
    }

    deinit { records.deallocate() }

    /// The thread's usage at a cycle's start, after the cycle's clock reading, to pass to
    /// ``record(start:sampleTime:frames:usageAtStart:)``: nil once the recorder is full. Real-time thread only.
    @inline(__always)
    func usageAtStart() -> ThreadUsage? {
        published.load(ordering: .relaxed) < capacity ? ThreadUsage.current() : nil
    }

    /// Records a cycle that began at `start` and ends now. The usage is read before the end's clock, so that the
    /// CPU time is measured within the cycle's wall time. Real-time thread only.
    @inline(__always)
    func record(start: UInt64, sampleTime: Int64, frames: Int, usageAtStart: ThreadUsage?) {
        let n = published.load(ordering: .relaxed)
        guard n < capacity else { return }
        let usage = usageAtStart == nil ? nil : ThreadUsage.current()
        let end = monotonicNanoseconds()
        var timing = CycleTiming(start: start, duration: end &- start, sampleTime: sampleTime, frames: frames)
        if let a = usageAtStart, let b = usage {
            timing.cpuTime = b.cpuTime > a.cpuTime ? b.cpuTime - a.cpuTime : 0
            timing.voluntarySwitches = max(0, b.voluntarySwitches - a.voluntarySwitches)
            timing.involuntarySwitches = max(0, b.involuntarySwitches - a.involuntarySwitches)
            timing.pageFaults = max(0, b.pageFaults - a.pageFaults)
            timing.usageMeasured = true
        }
        records[n] = timing
        published.store(n + 1, ordering: .releasing)
    }

    var snapshot: [CycleTiming] {
        let n = published.load(ordering: .acquiring)
        return Array(UnsafeBufferPointer(start: records, count: n))
    }
}
