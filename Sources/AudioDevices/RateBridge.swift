import AudioCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Frames of planar Float32 waiting between two stages: appended at the end, taken from the front. Render thread;
/// never allocates after init.
struct PlanarFIFO {
    private let storage: PCMBuffer
    private var start = 0
    private var end = 0

    init(channelCount: Int, capacity: Int) { storage = PCMBuffer(channelCount: channelCount, capacity: capacity) }

    var count: Int { end - start }
    var capacity: Int { storage.capacity }
    var channelCount: Int { storage.channelCount }

    /// Room at the end for `frames` frames (moving what is held to the front when needed), or nil when full.
    mutating func reserve(_ frames: Int) -> BufferView? {
        if end + frames > storage.capacity, start > 0 {
            let all = storage.view(frames: storage.capacity)
            for c in 0..<storage.channelCount {
                let base = all[c].baseAddress!
                memmove(base, base + start, (end - start) * MemoryLayout<Float>.size)
            }
            end -= start
            start = 0
        }
        guard end + frames <= storage.capacity else { return nil }
        return storage.view(frames: storage.capacity).slice(from: end, frames: frames)
    }

    /// Counts `frames` frames written into the last reserved room.
    mutating func commit(_ frames: Int) { end += frames }

    /// The frames held, front first.
    var held: BufferView { storage.view(frames: storage.capacity).slice(from: start, frames: end - start) }

    mutating func drop(_ frames: Int) {
        start += min(frames, count)
        if start == end {
            start = 0
            end = 0
        }
    }

    mutating func clear() {
        start = 0
        end = 0
    }
}

/// Runs a client (a graph, callbacks) at its own rate on a device that granted another: the capture is converted
/// to the client's rate, the client renders as many of its frames as the device's cycle needs, and its output is
/// converted to the device's rate. Both sides run on the device's clock, so over time the client renders exactly
/// the device's frames × client rate / device rate.
///
/// Latency: the two converters' delay (libsoxr gives output in blocks), and the capture held in hand so the
/// client's varying cycles never find it short — measured when the bridge is made, by running its cycles.
///
/// Thread safety: made and reset on the control side; the other methods on the device thread only (they neither
/// allocate nor lock).
final class RateBridge: @unchecked Sendable {
    // Unchecked Sendable: FIFOs and converters the device thread's while it runs, made and reset while stopped; latencies set in init
    let deviceRate: Double
    let clientRate: Double
    /// The most client frames one client cycle may take.
    let clientMaximum: Int
    /// Capture frames (at the client's rate) kept in hand beyond the converters' look-ahead.
    static let captureMargin = 64
    /// Capture frames in hand at the start (silence): what the client's cycles take beyond what has been
    /// converted at worst (measured when the bridge is made), and the margin.
    private(set) var cushion: Int

    private let captureConverter: SampleRateConverter?
    private let playConverter: SampleRateConverter?
    private var captured: PlanarFIFO
    private var played: PlanarFIFO
    /// The client's input for one cycle.
    private let clientInput: PCMBuffer
    /// Silence for a client cycle that rendered nothing.
    private let silenceBuffer: PCMBuffer
    /// Client cycles whose capture came up short (filled with silence).
    let shortfalls = Atomic<Int>(0)
    /// Device cycles whose playback came up short (filled with silence).
    let playShortfalls = Atomic<Int>(0)
    /// Latency the bridge adds, seconds, as measured when it is made: how much later a click comes out of each
    /// side than it would with no conversion.
    private(set) var captureLatency: Double
    private(set) var playLatency: Double

    init(
        deviceRate: Double, clientRate: Double, inputChannels: Int, outputChannels: Int, devicePeriod: Int,
        clientMaximum: Int, quality: SampleRateConverter.Quality = .high
    ) throws(AudioError) {
        self.deviceRate = deviceRate
        self.clientRate = clientRate
        self.clientMaximum = clientMaximum
        let ratio = clientRate / deviceRate
        let clientPeriod = Int((Double(devicePeriod) * ratio).rounded(.up))
        let room = 4 * (clientPeriod + clientMaximum) + 16_384
        captureConverter =
            inputChannels > 0
            ? try SampleRateConverter(inputRate: deviceRate, outputRate: clientRate, channelCount: inputChannels, quality: quality) : nil
        playConverter =
            outputChannels > 0
            ? try SampleRateConverter(inputRate: clientRate, outputRate: deviceRate, channelCount: outputChannels, quality: quality) : nil
        captured = PlanarFIFO(channelCount: max(inputChannels, 1), capacity: room)
        played = PlanarFIFO(channelCount: max(outputChannels, 1), capacity: 4 * devicePeriod + 16_384)
        clientInput = PCMBuffer(channelCount: max(inputChannels, 1), capacity: max(clientMaximum, 1))
        silenceBuffer = PCMBuffer(channelCount: max(outputChannels, 1), capacity: max(clientMaximum, 1))
        cushion = 0
        captureLatency = 0
        playLatency = 0
        // libsoxr gives its output in blocks, so how much capture the client's cycles find in hand, and how late
        // each side's signal comes out, depend on the device's period: run two seconds of cycles here, with
        // silence and then a click each way, and measure both (this also allocates libsoxr's working memory).
        let cycles = Int(2 * deviceRate) / devicePeriod + 1
        let deficit = simulate(devicePeriod: devicePeriod, cycles: cycles, clicks: false).deficit
        cushion = inputChannels > 0 && outputChannels > 0 ? deficit + Self.captureMargin : 0
        let measured = simulate(devicePeriod: devicePeriod, cycles: cycles, clicks: true)
        captureLatency = measured.capture
        playLatency = measured.play
        reset()
    }

    /// Runs `cycles` device cycles as the I/O unit would, the client taking capture and giving silence (or a
    /// click, at 0.5 s, on each side). Returns the most capture the client took beyond what had been converted
    /// (frames), and — with clicks — the seconds each side's click came out late.
    private func simulate(devicePeriod: Int, cycles: Int, clicks: Bool) -> (deficit: Int, capture: Double, play: Double) {
        reset()
        let deviceIn = PCMBuffer(channelCount: captured.channelCount, capacity: devicePeriod)
        let deviceOut = PCMBuffer(channelCount: played.channelCount, capacity: devicePeriod)
        let clientOut = PCMBuffer(channelCount: played.channelCount, capacity: clientMaximum)
        let deviceClick = Int(deviceRate / 2)
        let clientClick = Int(clientRate / 2)
        var convertedTotal = 0
        var takenTotal = 0
        var deficit = 0
        var clientFrame = 0
        var captureAt = (value: Float(0), frame: 0)
        var playAt = (value: Float(0), frame: 0)
        for cycle in 0..<cycles {
            let first = cycle * devicePeriod
            let input = deviceIn.view(frames: devicePeriod)
            input.clear()
            if clicks, (first..<(first + devicePeriod)).contains(deviceClick) { input[0][deviceClick - first] = 1 }
            if captureConverter != nil { convertedTotal += capture(input) }
            if playConverter == nil {
                let k = captureReady
                if k > 0 { _ = takeCapture(k, counting: false) }
                continue
            }
            var rounds = 0
            while rounds < Self.maximumClientCycles {
                let k = framesToRender(deviceFrames: devicePeriod)
                if k == 0 { break }
                rounds += 1
                if captureConverter != nil {
                    takenTotal += k
                    deficit = max(deficit, takenTotal - convertedTotal)
                    let got = takeCapture(k, counting: false)
                    for i in 0..<k where abs(got[0][i]) > captureAt.value { captureAt = (abs(got[0][i]), clientFrame + i) }
                }
                let out = clientOut.view(frames: k)
                out.clear()
                if clicks, (clientFrame..<(clientFrame + k)).contains(clientClick) { out[0][clientClick - clientFrame] = 1 }
                clientFrame += k
                play(out)
            }
            let output = deviceOut.view(frames: devicePeriod)
            takePlayback(into: output)
            for i in 0..<devicePeriod where abs(output[0][i]) > playAt.value { playAt = (abs(output[0][i]), first + i) }
        }
        let captureLate = captureConverter == nil ? 0 : Double(captureAt.frame) / clientRate - Double(deviceClick) / deviceRate
        let playLate = playConverter == nil ? 0 : Double(playAt.frame) / deviceRate - Double(clientClick) / clientRate
        return (deficit, max(captureLate, 0), max(playLate, 0))
    }

    /// Forgets both sides' signal and puts the capture cushion (silence) in hand. Control side.
    func reset() {
        captureConverter?.reset()
        playConverter?.reset()
        captured.clear()
        played.clear()
        if cushion > 0, let room = captured.reserve(cushion) {
            room.clear()
            captured.commit(cushion)
        }
    }

    /// Converts one device cycle's capture to the client's rate; returns the client frames it gave.
    @discardableResult
    func capture(_ input: BufferView) -> Int {
        guard let captureConverter else { return 0 }
        return Self.convert(input, with: captureConverter, into: &captured)
    }

    /// Runs `input` through `converter` onto the end of `fifo`; returns the frames it gave. Bounded: libsoxr always
    /// takes or gives something, and a full FIFO ends it.
    @discardableResult
    private static func convert(_ input: BufferView, with converter: SampleRateConverter, into fifo: inout PlanarFIFO) -> Int {
        var given = 0
        var taken = 0
        var rounds = 0
        while taken < input.frameCount, rounds < 64 {
            rounds += 1
            let space = min(4096, fifo.capacity - fifo.count)
            guard space > 0, let room = fifo.reserve(space) else { break }
            let r = converter.process(input: input.slice(from: taken, frames: input.frameCount - taken), output: room)
            fifo.commit(r.produced)
            given += r.produced
            taken += r.consumed
            if r.consumed == 0 && r.produced == 0 { break }
        }
        return given
    }

    /// Client frames to render next so the device's `deviceFrames` can be played, or 0 when enough is converted:
    /// what is missing at the client's rate, and at least ``minimumClientCycle`` (libsoxr gives its output in
    /// blocks, and a few frames at a time would take many cycles to reach one).
    func framesToRender(deviceFrames: Int) -> Int {
        let missing = deviceFrames - played.count
        guard missing > 0 else { return 0 }
        let wanted = Int((Double(missing) * clientRate / deviceRate).rounded(.up)) + 1
        return min(max(wanted, Self.minimumClientCycle), clientMaximum)
    }

    /// The fewest client frames a client cycle renders.
    static let minimumClientCycle = 64
    /// The most client cycles one device cycle runs (a bound; far more than any rate pair needs).
    static let maximumClientCycles = 256

    /// With no playback: the client frames the capture holds beyond the cushion, up to ``clientMaximum``.
    var captureReady: Int { min(max(captured.count - cushion, 0), clientMaximum) }

    /// The next `frames` client frames of capture (silence for any the capture lacks, counted as a shortfall).
    /// Valid until the next call.
    func takeCapture(_ frames: Int, counting: Bool = true) -> BufferView {
        let out = clientInput.view(frames: frames)
        let have = min(captured.count, frames)
        if have > 0 { out.prefix(have).copy(from: captured.held.prefix(have)) }
        if have < frames {
            out.slice(from: have, frames: frames - have).clear()
            if counting { shortfalls.add(1, ordering: .relaxed) }
        }
        captured.drop(have)
        return out
    }

    /// Converts one client cycle's output to the device's rate.
    func play(_ output: BufferView) {
        guard let playConverter else { return }
        Self.convert(output, with: playConverter, into: &played)
    }

    /// Channels of the device's playback.
    var playChannels: Int { played.channelCount }

    /// A client cycle that rendered nothing: `frames` frames of silence, converted like any other.
    func playSilence(frames: Int) {
        let silence = silenceBuffer.view(frames: min(frames, silenceBuffer.capacity))
        silence.clear()
        play(silence)
    }

    /// Writes the device cycle's playback (silence for any not converted yet).
    func takePlayback(into output: BufferView) {
        let have = min(played.count, output.frameCount)
        if have > 0 { output.prefix(have).copy(from: played.held.prefix(have)) }
        if have < output.frameCount {
            output.slice(from: have, frames: output.frameCount - have).clear()
            playShortfalls.add(1, ordering: .relaxed)
        }
        played.drop(have)
    }
}
