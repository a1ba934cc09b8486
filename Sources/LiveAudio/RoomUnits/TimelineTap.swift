import AudioCore
import AudioDevices
import AudioGraph
import AudioUnits
import Synchronization

/// Passes its input through and keeps the sample time after the last cycle: the graph's timeline, read by the control
/// thread to schedule on it. It also keeps the room's clock against the host's: of each half second of cycles, the
/// one whose host time came least late for its sample time (a cycle's host time is only ever late, by its wake-up),
/// published for ``clockReading`` — what places a phone's audio, stamped on the host's clock, on the timeline.
final class TimelineTap: RenderUnit {
    let core: UnitCore
    private let end = Atomic<Int64>(0)
    /// Cycles' sample and host times, best of a window: written by the render thread under a sequence count (odd
    /// while writing), read by the control side.
    private let sequence = Atomic<UInt64>(0)
    private let publishedSample = Atomic<Int64>(0)
    private let publishedHost = Atomic<UInt64>(0)
    private let window: Int64
    private let nanosecondsPerFrame: Double
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
    }

    var sampleTime: Int64 { end.load(ordering: .acquiring) }

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
