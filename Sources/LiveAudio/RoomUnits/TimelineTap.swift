import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// Passes its input through and keeps the sample time after the last cycle: the graph's timeline, read by the control
/// thread to schedule on it. It also keeps the room's clock against the host's: of each half second of cycles, the
/// one whose host time came least late for its sample time (a cycle's host time is only ever late, by its wake-up),
/// published for ``clockReading`` — what places a phone's audio, stamped on the host's clock, on the timeline. And it
/// notes the timeline's gaps: a cycle whose sample time comes later than the last one's end (the device away, the
/// graph stopped by the sound server), for ``gaps(from:to:)``.
final class TimelineTap: RenderUnit {
    let core: UnitCore
    private let end = Atomic<Int64>(0)
    private let gapLog = GapLog()
    /// The render thread's: the sample time after the last cycle (`.min` before the first).
    private let lastEnd = RenderThreadBound(Int64.min)
    /// Cycles' sample and host times, best of a window: written by the render thread under a sequence count (odd
    /// while writing), read by the control side.
    private let sequence = Atomic<UInt64>(0)
    private let publishedSample = Atomic<Int64>(0)
    private let publishedHost = Atomic<UInt64>(0)
    private let window: Int64
    private let nanosecondsPerFrame: Double
    private let sampleRate: Double
    private struct Best {
        var windowStart: Int64 = .min
        var sample: Int64 = 0, host: UInt64 = 0, lateness = Double.infinity
    }
    private let best = RenderThreadBound(Best())

    init(format: StreamFormat) {
        let f = try! StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        core = UnitCore(kind: "timeline", inputs: [f], outputs: [f])
        window = Int64(format.sampleRate / 2)
        nanosecondsPerFrame = 1e9 / format.sampleRate
        sampleRate = format.sampleRate
    }

    var sampleTime: Int64 { end.load(ordering: .acquiring) }

    /// The timeline's gaps that begin in `from ..< to`, as seconds from `from` and seconds long (the first 256 of the
    /// evening). Any thread.
    func gaps(from: Int64, to: Int64) -> [TimelineGap] {
        gapLog.all.filter { $0.at >= from && $0.at < to }.map {
            TimelineGap(at: Double($0.at - from) / sampleRate, seconds: Double($0.frames) / sampleRate)
        }
    }

    /// The newest published reading: a cycle's first sample time and its host time (CLOCK_MONOTONIC ns), the least
    /// late of its half second; nil before the first (or offline, without host times).
    var clockReading: (sample: Int64, host: UInt64)? {
        for _ in 0..<4 {
            let before = sequence.load(ordering: .acquiring)
            guard before & 1 == 0 else { continue }
            let sample = publishedSample.load(ordering: .relaxed), host = publishedHost.load(ordering: .relaxed)
            atomicMemoryFence(ordering: .acquiring)
            if sequence.load(ordering: .relaxed) == before { return before == 0 ? nil : (sample, host) }
        }
        return nil
    }

    func render(_ context: RenderContext) {
        context.output(0).copy(from: context.input(0))
        let t = context.timeStamp
        if lastEnd.onRenderThread != .min, t.sampleTime > lastEnd.onRenderThread {
            gapLog.add(at: lastEnd.onRenderThread, frames: t.sampleTime - lastEnd.onRenderThread)
        }
        lastEnd.onRenderThread = t.sampleTime + Int64(context.frameCount)
        end.store(t.sampleTime + Int64(context.frameCount), ordering: .releasing)
        guard t.hostTime != 0 else { return }
        let lateness = Double(t.hostTime) - Double(t.sampleTime) * nanosecondsPerFrame
        let windowStart = t.sampleTime - t.sampleTime % window
        if best.onRenderThread.windowStart != windowStart {
            // A window ended: its best cycle is published.
            if best.onRenderThread.lateness.isFinite {
                let s = sequence.load(ordering: .relaxed)
                sequence.store(s + 1, ordering: .relaxed)
                atomicMemoryFence(ordering: .releasing)
                publishedSample.store(best.onRenderThread.sample, ordering: .relaxed)
                publishedHost.store(best.onRenderThread.host, ordering: .relaxed)
                sequence.store(s + 2, ordering: .releasing)
            }
            best.onRenderThread = Best(windowStart: windowStart)
        }
        if lateness < best.onRenderThread.lateness {
            best.onRenderThread.lateness = lateness
            best.onRenderThread.sample = t.sampleTime
            best.onRenderThread.host = t.hostTime
        }
    }
}

/// A gap in a room's timeline: cycles stopped while the device was away or the sound server held the graph (an
/// interruption). The recordings and the stream carry it as silence, in its place, so they keep the wall time; the
/// song resumes where it stopped.
public struct TimelineGap: Sendable, Equatable, CustomStringConvertible {
    /// Seconds from the start of the recording it is in (the room's, or the take's stems') to the gap.
    public let at: Double
    /// Seconds the gap held.
    public let seconds: Double

    public var description: String { String(cFormat: "%.3f s of silence at %.3f s", seconds, at) }
}

/// The gaps a render thread noted, (sample time, frames) each: appended by one thread, read by any. An entry is
/// written before the count that covers it is stored (releasing) and never again; past the capacity, none is noted.
private final class GapLog: @unchecked Sendable {
    // Unchecked Sendable: one writer appends, entries below `count` are immutable (see above).
    private static let capacity = 256
    private let entries = UnsafeMutablePointer<(at: Int64, frames: Int64)>.allocate(capacity: capacity)
    private let count = Atomic<Int>(0)

    deinit { entries.deallocate() }

    /// Render thread.
    func add(at: Int64, frames: Int64) {
        let n = count.load(ordering: .relaxed)
        guard n < Self.capacity else { return }
        entries[n] = (at, frames)
        count.store(n + 1, ordering: .releasing)
    }

    var all: [(at: Int64, frames: Int64)] {
        let n = count.load(ordering: .acquiring)
        return (0..<n).map { entries[$0] }
    }
}
