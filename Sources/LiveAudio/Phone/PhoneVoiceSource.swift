import AudioCore
import AudioGraph
import Synchronization

/// A phone's voice on the device thread: the audio a ``PhoneVoiceFeed`` brings, each chunk put where its room
/// sample time says, read ``delayFrames`` behind the device's time — what the network took, the jitter buffer's
/// margin and the phone's own delays, so that audio which arrived late still lands at the time it was sung.
///
/// Each cycle it takes every chunk waiting in the feed into a ring of its own (a frame's slot is its room sample
/// time modulo the ring), then outputs the frames for `[t − delay, t − delay + n)` — silence where nothing arrived —
/// and clears them. A chunk for frames already read is late (counted, dropped); one beyond the ring is early
/// (counted, dropped: a clock that went wrong).
///
/// Thread safety: ``render(_:)`` on the render thread; the counters from any thread; ``setDelayFrames(_:)`` from the
/// control side (it takes effect at the next cycle: a jump, so set it while the voice is silent).
public final class PhoneVoiceSource: RenderUnit, @unchecked Sendable {
    // Unchecked Sendable: the ring and the read position are the render thread's (`ring` is touched only in render);
    // the counters are atomics.
    public let core: UnitCore
    /// Frames the ring holds: the longest delay and 2 s more, to a power of two.
    public let capacity: Int
    private let mask: Int64
    private let samples: UnsafeMutablePointer<Float>
    private let valid: UnsafeMutablePointer<UInt8>
    private let delay = Atomic<Int>(0)
    private let placed = Atomic<Int>(0)
    private let late = Atomic<Int>(0)
    private let early = Atomic<Int>(0)
    private let holes = Atomic<Int>(0)
    private let newestEnd = Atomic<Int64>(.min)
    private let readAt = Atomic<Int64>(.min)
    private let firstPosition = Atomic<Int64>(.max)
    private let restart = Atomic<Bool>(false)
    /// Whether the phone's audio was there, a bit a frame of the output's time (the device's), for the last
    /// `heardMask + 1` frames: what a pitch track marks as a gap (``shareHeard(from:to:)``). The render thread writes
    /// the words (it alone), any thread reads them.
    private let heard: UnsafeMutablePointer<Atomic<UInt64>>
    private let heardMask: Int64
    /// A second of frames: what `shareHeard` keeps clear of the frames the writer may be at.
    private let heardMargin: Int64
    /// The output's time up to which `heard` is written (`.min` before the first cycle).
    private let heardEnd = Atomic<Int64>(.min)
    /// The feed it reads.
    public let feed: PhoneVoiceFeed

    /// A source at `sampleRate` reading `feed` (mono, copied to each of `channelCount` channels), able to run up to
    /// `maximumDelay` seconds behind the device.
    /// - Throws: ``/AudioCore/AudioError`` `.unsupportedSampleRate` for a rate out of range.
    public init(sampleRate: Double, feed: PhoneVoiceFeed, channelCount: Int = 1, maximumDelay: Double = 2) throws(AudioError) {
        let format = try StreamFormat.graph(sampleRate: sampleRate, channelCount: channelCount)
        core = UnitCore(kind: "phoneVoice", inputs: [], outputs: [format])
        self.feed = feed
        var c = 1
        while Double(c) < (maximumDelay + 2) * sampleRate { c <<= 1 }
        capacity = c
        mask = Int64(c - 1)
        samples = .allocate(capacity: c)
        samples.initialize(repeating: 0, count: c)
        valid = .allocate(capacity: c)
        valid.initialize(repeating: 0, count: c)
        // At least 8 s of frames (2¹⁹ at 48 kHz: 10.9 s), a bit each.
        var bits = 1 << 16
        while Double(bits) < 8 * sampleRate { bits <<= 1 }
        heardMask = Int64(bits - 1)
        heardMargin = Int64(sampleRate.rounded(.up))
        heard = .allocate(capacity: bits / 64)
        for i in 0..<(bits / 64) { (heard + i).initialize(to: Atomic<UInt64>(0)) }
    }

    deinit {
        samples.deallocate()
        valid.deallocate()
        heard.deinitialize(count: Int(heardMask + 1) / 64)
        heard.deallocate()
    }

    /// The share of the frames `[from, to)` of the output's time (the device's sample time, as rendered) that had the
    /// phone's audio — 0 for a connection lost or packets that never came, or before the phone sang — or nil for
    /// frames not rendered yet or rendered longer ago than it keeps (at least 7 s; 9.9 s at 48 kHz). Any thread.
    public func shareHeard(from: Int64, to: Int64) -> Double? {
        let end = heardEnd.load(ordering: .acquiring)
        // Frames the writer may be overwriting (its next cycle's) are kept out: a second's margin.
        guard end != .min, from < to, to <= end, end - from <= heardMask + 1 - heardMargin else { return nil }
        var count = 0
        for p in from..<to {
            let b = Int(p & heardMask)
            if heard[b >> 6].load(ordering: .relaxed) & (UInt64(1) << UInt64(b & 63)) != 0 { count += 1 }
        }
        return Double(count) / Double(to - from)
    }

    /// Frames the output runs behind the device's time.
    public var delayFrames: Int { delay.load(ordering: .relaxed) }

    /// Sets the delay, 0 … the ring's capacity less 1 s.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` beyond that.
    public func setDelayFrames(_ frames: Int) throws(AudioError) {
        guard frames >= 0, frames <= capacity - Int(core.outputFormats[0].sampleRate) else {
            throw AudioError(.invalidParameter, "a phone voice's delay of \(frames) frames: 0 … \(capacity - Int(core.outputFormats[0].sampleRate))")
        }
        delay.store(frames, ordering: .relaxed)
    }

    /// What the voice has seen, as counters.
    public struct Counters: Sendable, Equatable {
        /// Frames put in the ring in time.
        public var placed = 0
        /// Frames that came after their time had been played (dropped).
        public var late = 0
        /// Frames that came more than the ring ahead of their time (dropped).
        public var early = 0
        /// Frames played as silence inside the voice's run (between frames that came): lost on the way.
        public var holes = 0
        /// How far ahead of what is played now the newest frame placed reaches, in frames (the jitter buffer's
        /// margin; negative: behind); nil before the first.
        public var margin: Int64?

        /// Nothing seen yet.
        public init() {}

        init(placed: Int, late: Int, early: Int, holes: Int, margin: Int64?) {
            self.placed = placed
            self.late = late
            self.early = early
            self.holes = holes
            self.margin = margin
        }
    }

    /// The counters now (any thread).
    public var counters: Counters {
        let end = newestEnd.load(ordering: .relaxed), at = readAt.load(ordering: .relaxed)
        return Counters(
            placed: placed.load(ordering: .relaxed), late: late.load(ordering: .relaxed), early: early.load(ordering: .relaxed),
            holes: holes.load(ordering: .relaxed),
            margin: end == .min || at == .min ? nil : end - at)
    }

    /// A new phone's run begins: the counts of where its frames reach start again (the device thread takes it at its
    /// next cycle).
    public func newRun() { restart.store(true, ordering: .releasing) }

    public func render(_ context: RenderContext) {
        let q = context.timeStamp.sampleTime - Int64(delay.load(ordering: .relaxed))
        let n = context.frameCount
        let out = context.output(0)[0]
        if restart.exchange(false, ordering: .acquiring) {
            newestEnd.store(.min, ordering: .relaxed)
            firstPosition.store(.max, ordering: .relaxed)
        }
        // Time jumped on (a device that recovered or reopened): what was placed for the frames skipped is cleared, or
        // it would play a lap of the ring later.
        let last = readAt.load(ordering: .relaxed)
        if last != .min, q > last {
            let skipped = min(q - last, Int64(capacity))
            for i in 0..<Int(skipped) {
                let slot = Int((last + Int64(i)) & mask)
                samples[slot] = 0
                valid[slot] = 0
            }
        }
        // Every chunk waiting, into the ring.
        var placedNow = 0, lateNow = 0, earlyNow = 0
        var newest = newestEnd.load(ordering: .relaxed)
        var first = firstPosition.load(ordering: .relaxed)
        let limit = q + mask  // positions from q to q + capacity − 1 fit
        while feed.pop({ position, chunk in
            for i in 0..<chunk.count {
                let p = position + Int64(i)
                if p < q {
                    lateNow += 1
                } else if p > limit {
                    earlyNow += 1
                } else {
                    let slot = Int(p & mask)
                    samples[slot] = chunk[i]
                    valid[slot] = 1
                    placedNow += 1
                    if p + 1 > newest { newest = p + 1 }
                    if p < first { first = p }
                }
            }
        }) {}
        if placedNow > 0 {
            placed.add(placedNow, ordering: .relaxed)
            newestEnd.store(newest, ordering: .relaxed)
            firstPosition.store(first, ordering: .relaxed)
        }
        if lateNow > 0 { late.add(lateNow, ordering: .relaxed) }
        if earlyNow > 0 { early.add(earlyNow, ordering: .relaxed) }
        // The frames of [q, q + n): what came, silence elsewhere; then the slots are free for the ring's next lap.
        // Which of them came is kept by the output's time, a bit a frame.
        var holesNow = 0
        let t = context.timeStamp.sampleTime
        var word = -1
        var bits: UInt64 = 0
        for i in 0..<n {
            let p = q + Int64(i)
            let slot = Int(p & mask)
            let came = valid[slot] != 0
            if came {
                out[i] = samples[slot]
                samples[slot] = 0
                valid[slot] = 0
            } else {
                out[i] = 0
                if p >= first, p < newest { holesNow += 1 }
            }
            let b = Int((t + Int64(i)) & heardMask)
            if b >> 6 != word {
                if word >= 0 { heard[word].store(bits, ordering: .relaxed) }
                word = b >> 6
                bits = heard[word].load(ordering: .relaxed)
            }
            let bit = UInt64(1) << UInt64(b & 63)
            bits = came ? bits | bit : bits & ~bit
        }
        if word >= 0 { heard[word].store(bits, ordering: .relaxed) }
        heardEnd.store(t + Int64(n), ordering: .releasing)
        let output = context.output(0)
        for c in 1..<max(1, output.channelCount) { output[c].baseAddress!.update(from: out.baseAddress!, count: n) }
        if holesNow > 0 { holes.add(holesNow, ordering: .relaxed) }
        readAt.store(q + Int64(n), ordering: .relaxed)
    }
}
