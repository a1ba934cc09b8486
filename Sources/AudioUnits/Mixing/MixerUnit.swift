import AudioCore
import AudioGraph

/// Mixes N input buses into one output: LiveAudio's MultiChannelMixer.
///
/// Per bus `i`: `volume.i` (linear, 0 … 4, default 1), `pan.i` (−1 … 1, default 0) and `enable.i` (0/1, default 1);
/// `masterVolume` (linear, 0 … 4, default 1). Every gain is smoothed over 20 ms, enabling and disabling included.
///
/// Pan is a balance for stereo output: left gain `min(1, 1 − pan)`, right gain `min(1, 1 + pan)`, so 0 leaves a
/// stereo input unchanged and ±1 silences the other side; a mono source fed to a stereo bus is copied to both
/// channels first. With other channel counts pan is ignored.
///
/// Meters: ``meter(bus:)`` (each bus after its volume, pan and enable) and ``masterMeter`` (the output), peak and RMS
/// readable from the control thread.
public final class MixerUnit: RenderUnit {
    public let core: UnitCore
    /// The number of input buses (1 … 64), fixed at init.
    public let busCount: Int
    private let volumes: [Parameter]
    private let pans: [Parameter]
    private let enables: [Parameter]
    private let master: Parameter
    /// The gain and pan ramps: the render thread's.
    private let state: RenderThreadBound<RenderState>
    private let busMeters: [LevelMeter]
    /// Peak and RMS of the output, after `masterVolume`; read it from the control thread.
    public let masterMeter = LevelMeter()

    private struct RenderState {
        var busGain: [SmoothedValue]
        var busPan: [SmoothedValue]
        var masterGain = SmoothedValue(1, rampFrames: 0)
    }

    /// - Parameters:
    ///   - format: the output format; every input bus has the same format.
    ///   - inputs: the number of input buses (1 … 64).
    public init(format: StreamFormat, inputs: Int) throws(AudioError) {
        guard (1...64).contains(inputs) else {
            throw AudioError(.invalidBus, "mixer: inputs must be between 1 and 64, got \(inputs)")
        }
        let f = try StreamFormat.graph(sampleRate: format.sampleRate, channelCount: format.channelCount)
        var specs: [ParameterSpec] = []
        for i in 0..<inputs {
            specs.append(ParameterSpec("volume.\(i)", name: "Volume \(i)", range: 0...4, unit: .linearGain, default: 1))
            specs.append(ParameterSpec("pan.\(i)", name: "Pan \(i)", range: -1...1, unit: .pan, default: 0))
            specs.append(ParameterSpec("enable.\(i)", name: "Enable \(i)", range: 0...1, unit: .boolean, default: 1))
        }
        specs.append(ParameterSpec("masterVolume", name: "Master volume", range: 0...4, unit: .linearGain, default: 1))
        busCount = inputs
        state = RenderThreadBound(
            RenderState(
                busGain: Array(repeating: SmoothedValue(1, rampFrames: 0), count: inputs),
                busPan: Array(repeating: SmoothedValue(0, rampFrames: 0), count: inputs)))
        busMeters = (0..<inputs).map { _ in LevelMeter() }
        let all = specs.map { Parameter($0, owner: "mixer") }
        volumes = (0..<inputs).map { all[3 * $0] }
        pans = (0..<inputs).map { all[3 * $0 + 1] }
        enables = (0..<inputs).map { all[3 * $0 + 2] }
        master = all[3 * inputs]
        core = UnitCore(kind: "mixer", inputs: Array(repeating: f, count: inputs), outputs: [f], parameters: all)
    }

    /// Sets bus `bus`'s volume (linear).
    public func setVolume(_ value: Float, bus: Int) throws(AudioError) { try checkedBus(bus, volumes).set(value) }
    /// Sets bus `bus`'s pan (−1 … 1).
    public func setPan(_ value: Float, bus: Int) throws(AudioError) { try checkedBus(bus, pans).set(value) }
    /// Enables or disables bus `bus` (a disabled bus fades out over 20 ms).
    public func setEnabled(_ on: Bool, bus: Int) throws(AudioError) { try checkedBus(bus, enables).set(on ? 1 : 0) }
    /// Sets the master volume (linear).
    public func setMasterVolume(_ value: Float) throws(AudioError) { try master.set(value) }

    /// The level of bus `bus` after its volume, pan and enable, since the last reading.
    public func meter(bus: Int) -> MeterReading { busMeters[bus].read() }

    private func checkedBus(_ bus: Int, _ list: [Parameter]) throws(AudioError) -> Parameter {
        guard list.indices.contains(bus) else {
            throw AudioError(.invalidBus, "mixer has no input bus \(bus) (it has \(busCount))")
        }
        return list[bus]
    }

    public func allocateRenderResources(_ spec: RenderSpec) throws(AudioError) {
        let frames = rampFrames(for: master)
        for i in 0..<busCount {
            state.whileStopped.busGain[i].rampFrames = frames
            state.whileStopped.busPan[i].rampFrames = frames
        }
        state.whileStopped.masterGain.rampFrames = frames
    }

    public func reset() {
        for i in 0..<busCount {
            state.whileStopped.busGain[i].reset(to: volumes[i].value * (enables[i].value >= 0.5 ? 1 : 0))
            state.whileStopped.busPan[i].reset(to: pans[i].value)
        }
        state.whileStopped.masterGain.reset(to: master.value)
        for m in busMeters { m.clear() }
        masterMeter.clear()
    }

    public func render(_ context: RenderContext) {
        let output = context.output(0)
        let frames = context.frameCount
        let channels = output.channelCount
        output.clear()
        let stereo = channels == 2
        for bus in 0..<busCount {
            let input = context.input(bus)
            var gain = state.onRenderThread.busGain[bus]
            var pan = state.onRenderThread.busPan[bus]
            gain.setTarget(volumes[bus].value * (enables[bus].value >= 0.5 ? 1 : 0))
            pan.setTarget(pans[bus].value)
            let startGain = gain
            let startPan = pan
            var peak: Float = 0
            var sum: Double = 0
            for c in 0..<channels {
                gain = startGain
                pan = startPan
                let x = input[c].baseAddress!
                let y = output[c].baseAddress!
                var localPeak: Float = 0
                var localSum: Float = 0
                if !gain.isRamping && !pan.isRamping {
                    let g = gain.value * (stereo ? Self.balance(pan.value, channel: c) : 1)
                    (localPeak, localSum) = VectorOps.multiplyAdd(x, gain: g, into: y, count: frames)
                } else {
                    for i in 0..<frames {
                        let g = gain.next() * (stereo ? Self.balance(pan.next(), channel: c) : 1)
                        let v = x[i] * g
                        y[i] += v
                        localPeak = max(localPeak, abs(v))
                        localSum += v * v
                    }
                }
                peak = max(peak, localPeak)
                sum += Double(localSum)
            }
            state.onRenderThread.busGain[bus] = gain
            state.onRenderThread.busPan[bus] = pan
            busMeters[bus].accumulate(peak: peak, sumOfSquares: sum, samples: frames * channels)
        }
        // Master volume and meter.
        var masterGain = state.onRenderThread.masterGain
        masterGain.setTarget(master.value)
        let startMaster = masterGain
        var peak: Float = 0
        var sum: Double = 0
        for c in 0..<channels {
            var m = startMaster
            let y = output[c].baseAddress!
            var localPeak: Float = 0
            var localSum: Float = 0
            if !m.isRamping {
                (localPeak, localSum) = VectorOps.scale(y, by: m.value, count: frames)
            } else {
                for i in 0..<frames {
                    let v = y[i] * m.next()
                    y[i] = v
                    localPeak = max(localPeak, abs(v))
                    localSum += v * v
                }
            }
            masterGain = m
            peak = max(peak, localPeak)
            sum += Double(localSum)
        }
        state.onRenderThread.masterGain = masterGain
        masterMeter.accumulate(peak: peak, sumOfSquares: sum, samples: frames * channels)
    }

    /// Stereo balance gain of `pan` for channel 0 (left) or 1 (right).
    @inline(__always)
    static func balance(_ pan: Float, channel: Int) -> Float {
        channel == 0 ? min(1, 1 - pan) : min(1, 1 + pan)
    }
}
