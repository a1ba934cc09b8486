// Counts heap allocations on the render thread, run with the malloc interposer preloaded:
//   LD_PRELOAD=.build/debug/libMallocInterposerSwift.so .build/debug/AllocationProbe render-cycles DIR
//   LD_PRELOAD=... AllocationProbe render-file DIR SECONDS
//   LD_PRELOAD=... AllocationProbe device-cycles DIR GRAPH.json jack SERVER | virtual
//   LD_PRELOAD=... AllocationProbe encoder-pushes DIR
//   LD_PRELOAD=... AllocationProbe loudness-history -
// Prints one JSON object; the tests in LiveAudioTests run it and judge the numbers.
import CAllocationProbe
import Foundation
import LiveAudio
import MallocInterposerSwift
import Synchronization

func writeTestFile(_ path: String, seconds: Double, channels: Int) throws {
    let format = try StreamFormat(sampleRate: 48_000, channelCount: channels, sampleType: .int16, interleaved: true)
    let writer = try WAVFileWriter(path: path, format: format)
    let block = PCMBuffer(channelCount: channels, capacity: 4800)
    var n = 0
    let total = Int(seconds * 48_000)
    while n < total {
        let frames = min(4800, total - n)
        for c in 0..<channels {
            for i in 0..<frames { block.view(frames: frames)[c][i] = 0.3 * Float(sin(2 * Double.pi * 330 * Double(n + i) / 48_000)) }
        }
        try writer.write(block.view(frames: frames))
        n += frames
    }
    try writer.finish()
}

func emit(_ fields: [String: Any]) {
    let data = try! JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}

func maxRSSKiB() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return usage.ru_maxrss
}

/// Every unit and every effect, with callback inputs and a mono source on a stereo bus; the control thread keeps
/// changing the graph, the parameters and the bypasses.
func renderCycles(directory: String) throws {
    let filePath = directory + "/probe-voice.wav"
    try writeTestFile(filePath, seconds: 2, channels: 1)
    let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
    let graph = try RenderGraph(format: format, maximumFrames: 512)
    let mixer = try MixerUnit(format: format, inputs: 8)
    let m = try graph.addNode(mixer, name: "mix")
    let file = try graph.addNode(FileSourceUnit(path: filePath), name: "file")
    let tone = try graph.addNode(ToneUnit(format: format, frequency: 440, amplitude: 0.2), name: "tone")
    let noise = try graph.addNode(NoiseUnit(format: format, amplitude: 0.05, seed: 3), name: "noise")
    let loop = PCMBuffer(channels: [(0..<1000).map { Float($0) / 1000 }])
    let player = try graph.addNode(BufferPlayerUnit(buffer: loop, sampleRate: 48_000, loop: true), name: "player")
    let gainUnit = try GainUnit(format: format, gain: -6)
    let gain = try graph.addNode(gainUnit, name: "trim")
    try graph.connect(file, to: m, inputBus: 0)
    try graph.connect(tone, to: m, inputBus: 1)
    try graph.connect(noise, to: m, inputBus: 2)
    try graph.connect(player, to: m, inputBus: 3)
    try graph.setInputCallback(m, inputBus: 4) { view, _ in
        for c in 0..<view.channelCount { view[c].update(repeating: 0.01) }
    }
    let client = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true)
    try graph.setInputCallback(m, inputBus: 5, format: client) { raw, _ in
        let p = raw.base.assumingMemoryBound(to: Int16.self)
        for i in 0..<(raw.frameCount * 2) { p[i] = 100 }
    }
    // A 44.1 kHz tone through a converter: a chain pulled at its own rate and pace.
    let cd = try StreamFormat.graph(sampleRate: 44_100, channelCount: 2)
    let cdTone = try graph.addNode(ToneUnit(format: cd, frequency: 330, amplitude: 0.1), name: "cdTone")
    // Mono from here (the converter averages the channels): the time-pitch's default engine costs a fifth of a
    // core per stereo channel pair in real time, and the probe renders minutes of audio.
    let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
    let converter = try graph.addNode(ConverterUnit(inputFormat: cd, outputFormat: mono), name: "to48")
    try graph.connect(cdTone, to: converter)
    // …and on through a time-pitch, which pulls the converter's chain in turn (rate and pitch move below).
    let timePitchUnit = try TimePitchUnit(format: mono)
    let timePitch = try graph.addNode(timePitchUnit, name: "timePitch")
    try graph.connect(converter, to: timePitch)
    try graph.connect(timePitch, to: m, inputBus: 7)
    try graph.connect(m, to: gain)
    // Every effect, in series after the trim; the control thread moves their parameters and bypasses.
    let effects: [RenderUnit] = [
        try EQUnit(format: format, bands: [
            EQBand(.highPass, frequency: 90), EQBand(.peak, frequency: 3000, gain: 3, bandwidth: 1),
            EQBand(.highShelf, frequency: 9000, gain: -2),
        ]),
        try LowPassUnit(format: format, cutoff: 12_000), try HighPassUnit(format: format, cutoff: 40),
        try BandPassUnit(format: format, frequency: 1000, bandwidth: 4),
        try DynamicsUnit(format: format), try ReverbUnit(format: format), try DelayUnit(format: format),
        try LimiterUnit(format: format), try LimiterUnit(format: format, truePeak: true),
    ]
    // The units whose parameters move: the effects and the time-pitch.
    let moving = effects + [timePitchUnit]
    var previous = gain
    for (i, unit) in effects.enumerated() {
        let node = try graph.addNode(unit, name: "effect\(i)")
        try graph.connect(previous, to: node)
        previous = node
    }
    try graph.connect(previous, to: graph.output)
    // The programme's loudness: a sink on the last effect, read and reset by the control thread.
    let loudness = try LoudnessMeterUnit(format: format)
    let loudnessNode = try graph.addNode(loudness, name: "loudness")
    try graph.connect(previous, to: loudnessNode)
    try graph.addSink(loudnessNode)
    try graph.initialize()
    try graph.start()
    let renderer = OfflineRenderer(graph: graph)
    let sizes = [1, 0, 17, 64, 128, 129, 256, 511, 512]
    // Warm up every path, including parameter ramps, glides and bypass fades: a debug build instantiates generic
    // metadata the first time a path runs (a one-time runtime cache entry, not a per-cycle allocation).
    for i in 0..<2000 {
        if i % 100 == 0 {
            for (u, unit) in moving.enumerated() {
                for (j, p) in unit.parameters.enumerated() {
                    let r = p === timePitchUnit.rate ? 0.5...2 : p.spec.range
                    try p.set(r.lowerBound + (r.upperBound - r.lowerBound) * Float((i / 100 + u + j) % 5) / 4)
                }
                unit.isBypassed = (i / 100 + u) % 3 == 0
            }
        }
        _ = try renderer.render(frames: sizes[i % sizes.count])
    }

    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    allocation_probe_reset()
    MallocInterposerSwift.hook()
    let stop = Locked(false)
    let changes = Locked(0)
    // Control thread: reconfigure, add and remove nodes, move parameters.
    let control = Thread {
        var k = 0
        while !stop.load() {
            do {
                switch k % 4 {
                case 0: try graph.disconnect(m, inputBus: 1)
                case 1: try graph.connect(tone, to: m, inputBus: 1)
                case 2:
                    let extra = try graph.addNode(ToneUnit(format: format, frequency: 220, amplitude: 0.1), name: "extra")
                    try graph.connect(extra, to: m, inputBus: 6)
                    try graph.removeNode(extra)
                default:
                    _ = loudness.read()
                    if k % 40 == 3 { loudness.meter.reset() }
                    try gainUnit.setParameter("gain", Float(k % 12) - 12)
                    try mixer.setPan(Float(k % 3) - 1, bus: 0)
                    // Every effect parameter somewhere new in its range; every so often a bypass flips.
                    for (i, unit) in moving.enumerated() {
                        for (j, p) in unit.parameters.enumerated() {
                            // The time-pitch's rate between 1/2 and 2 (its whole range, 1/32 … 32, would make
                            // the chain render up to 32 times a cycle's frames: minutes in a debug build).
                            let r = p === timePitchUnit.rate ? 0.5...2 : p.spec.range
                            let t = Float((k * 7 + i * 3 + j * 5) % 11) / 10
                            try p.set(r.lowerBound + (r.upperBound - r.lowerBound) * t)
                        }
                        if (k / 4 + i) % 5 == 0 { unit.isBypassed.toggle() }
                    }
                }
            } catch { fatalError("control thread: \(error)") }
            k += 1
            changes.add(1)
            usleep(20)
        }
    }
    let generationBefore = graph.scheduleGeneration
    var cycles = 0
    allocation_probe_watch_this_thread(1)
    while cycles < 12_000 {
        _ = try renderer.render(frames: sizes[cycles % sizes.count])
        cycles += 1
    }
    allocation_probe_watch_this_thread(0)
    control.start()
    allocation_probe_watch_this_thread(1)
    var swapped = 0
    while true {
        _ = try renderer.render(frames: sizes[cycles % sizes.count])
        cycles += 1
        if cycles >= 24_000 {
            // `changes` is read under a lock: not while watched.
            allocation_probe_watch_this_thread(0)
            let enough = changes.load() >= 1000 || cycles > 5_000_000
            allocation_probe_watch_this_thread(1)
            if enough { break }
        }
    }
    swapped = graph.scheduleGeneration - generationBefore
    allocation_probe_watch_this_thread(0)
    let lockWaits = allocation_probe_lock_waits()
    let frees = allocation_probe_frees()
    stop.store(true)
    while !control.isFinished { usleep(1000) }
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    emit([
        "cycles": cycles, "renderThreadAllocations": allocation_probe_count(),
        "renderThreadBytes": allocation_probe_bytes(), "schedulesPublished": swapped, "changes": changes.load(),
        "renderThreadLockWaits": lockWaits, "renderThreadFrees": frees,
    ])
}

/// A converter pulled in the sizes that once made libsoxr grow its buffers mid-run: for each of six rate pairs (up and
/// down, by small and large factors), a tone through a `ConverterUnit` rendered after a warm-up (libsoxr's buffers
/// grow during its first few hundred calls after the unit is prepared) in 30,000 watched cycles: stretches of
/// 1-frame cycles, random sizes up to the maximum, whole maxima. Allocations, frees and lock waits on the render
/// thread; a deliberate allocation among the watched cycles is the canary.
func converterSizes() throws {
    var allocations = 0, frees = 0, lockWaits = 0, cycles = 0, canary = 0
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    MallocInterposerSwift.hook()
    for (inRate, outRate) in [(44_100.0, 48_000.0), (48_000.0, 44_100.0), (8_000.0, 48_000.0), (48_000.0, 8_000.0),
                              (11_025.0, 48_000.0), (192_000.0, 44_100.0)] {
        let format = try StreamFormat.graph(sampleRate: outRate, channelCount: 2)
        let graph = try RenderGraph(format: format, maximumFrames: 512)
        let source = try StreamFormat.graph(sampleRate: inRate, channelCount: 2)
        let tone = try graph.addNode(ToneUnit(format: source, frequency: 330, amplitude: 0.3), name: "tone")
        let converter = try graph.addNode(ConverterUnit(inputFormat: source, outputFormat: format), name: "convert")
        try graph.connect(tone, to: converter)
        try graph.connect(converter, to: graph.output)
        try graph.initialize()
        try graph.start()
        let renderer = OfflineRenderer(graph: graph)
        // Warm-up: 1,000 of libsoxr's calls (128 input frames each) in 256-frame cycles.
        let warm = Int((1_000 * 128 * outRate / inRate / 256).rounded(.up))
        for _ in 0..<warm { _ = try renderer.render(frames: 256) }
        var generator = SplitMix64(seed: UInt64(inRate + outRate))
        let sizes: [Int] = (0..<30_000).map { i in
            switch (i / 500) % 3 {
            case 0: 1
            case 1: Int.random(in: 1...512, using: &generator)
            default: 512
            }
        }
        let canaryAt = inRate == 44_100 ? 15_000 : -1
        try sizes.withUnsafeBufferPointer { sizes in
            allocation_probe_reset()
            allocation_probe_watch_this_thread(1)
            var i = 0
            while i < sizes.count {
                _ = try renderer.render(frames: sizes[i])
                if i == canaryAt {
                    let box = UnsafeMutablePointer<Int>.allocate(capacity: 1)
                    box.deallocate()
                }
                i += 1
            }
            allocation_probe_watch_this_thread(0)
        }
        let counted = Int(allocation_probe_count())
        let freed = Int(allocation_probe_frees())
        if inRate == 44_100 {
            canary = counted
            allocations += counted - 1
            frees += freed - 1
        } else {
            allocations += counted
            frees += freed
        }
        lockWaits += Int(allocation_probe_lock_waits())
        cycles += sizes.count
        try graph.stop()
    }
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    emit(["cycles": cycles, "allocations": allocations, "canary": canary, "frees": frees, "lockWaits": lockWaits])
}

/// A stream's loudness meter fed ten minutes of stereo 48 kHz programme (music-like: tones that swell and decay, a
/// level that changes every few seconds) in 480-frame blocks as fast as it goes, on a watched thread: its
/// allocations and frees, and the heap in use (mallinfo2) after the first minute and after the tenth. Another thread
/// reads it all the while.
func loudnessHistory() throws {
    let rate = 48_000.0
    let meter = LoudnessMeter(sampleRate: rate, channelCount: 2)
    let block = PCMBuffer(channelCount: 2, capacity: 480)
    var n = 0
    func fill() {
        let level = Float(0.05 + 0.4 * Double((n / 240_000) % 5) / 4)
        for i in 0..<480 {
            let t = Double(n + i) / rate
            let v = level * Float(sin(2 * Double.pi * 220 * t) * exp(-3 * t.truncatingRemainder(dividingBy: 0.5)) + 0.3 * sin(2 * Double.pi * 1320 * t))
            block.storage[i] = v
            block.storage[block.channelStride + i] = v * 0.8
        }
        n += 480
    }
    let stop = Locked(false)
    let reads = Locked(0)
    let reader = Thread {
        while !stop.load() {
            _ = meter.read()
            reads.add(1)
            usleep(1000)
        }
    }
    reader.start()
    // The first second, unwatched: one-time runtime work of a debug build.
    for _ in 0..<100 { fill(); meter.accumulate(block.view(frames: 480)) }
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    allocation_probe_reset()
    MallocInterposerSwift.hook()
    var heap: [Int] = []
    heap.reserveCapacity(2)
    let blocksPerMinute = 6000
    for minute in 1...10 {
        // Watched while it meters; the blocks are made unwatched (the signal is not the meter's).
        for _ in 0..<(minute == 1 ? blocksPerMinute - 100 : blocksPerMinute) {
            fill()
            allocation_probe_watch_this_thread(1)
            meter.accumulate(block.view(frames: 480))
            allocation_probe_watch_this_thread(0)
        }
        if minute == 1 || minute == 10 { heap.append(Int(allocation_probe_heap_in_use())) }
    }
    let lockWaits = allocation_probe_lock_waits()
    let frees = allocation_probe_frees()
    let allocations = allocation_probe_count()
    // The count sees this thread: one deliberate allocation.
    allocation_probe_watch_this_thread(1)
    let canary = UnsafeMutablePointer<Int>.allocate(capacity: 64)
    allocation_probe_watch_this_thread(0)
    canary.deallocate()
    let canaries = allocation_probe_count() - allocations
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    stop.store(true)
    while !reader.isFinished { usleep(1000) }
    let r = meter.read()
    emit([
        "seconds": Int(r.duration.rounded()), "allocations": Int(allocations), "frees": frees, "canary": Int(canaries),
        "lockWaits": lockWaits, "heapAfter1Minute": heap[0], "heapAfter10Minutes": heap[1], "reads": reads.load(),
        "integratedTimes100": Int((r.integrated * 100).rounded()),
    ])
}

/// A voiceProcessing unit rendered offline for 10,000 cycles of 1 … 4096 frames: a noise as the microphone, music-like
/// tones as the reference; a control thread switches its modes and moves its levels. Reports what the render thread
/// allocated, freed and locked; the library's own calls are counted too (nothing on that thread is excused).
func voiceCycles() throws {
    let mono = try StreamFormat.graph(sampleRate: 48_000, channelCount: 1)
    let graph = try RenderGraph(format: mono, maximumFrames: 4096)
    let unit = try VoiceProcessingUnit(format: mono)
    let voice = try graph.addNode(unit, name: "voice")
    try graph.connect(try graph.addNode(NoiseUnit(format: mono, amplitude: 0.05, seed: 5), name: "mic"), to: voice, inputBus: 0)
    try graph.connect(try graph.addNode(ToneUnit(format: mono, frequency: 500, amplitude: 0.1), name: "reference"), to: voice, inputBus: 1)
    try graph.connect(voice, to: graph.output)
    try graph.initialize()
    try graph.start()
    let renderer = OfflineRenderer(graph: graph)
    let sizes = [1, 480, 17, 4096, 128, 333, 960, 0, 2048]
    @Sendable func move(_ k: Int) throws {
        for (j, p) in unit.parameters.enumerated() {
            let r = p.spec.range
            try p.set((r.lowerBound + (r.upperBound - r.lowerBound) * Float((k * 7 + j * 3) % 11) / 10).rounded())
        }
    }
    // Warm-up: every mode once (a debug build instantiates generic metadata the first time a path runs).
    for i in 0..<600 {
        if i % 20 == 0 { try move(i / 20) }
        _ = try renderer.render(frames: sizes[i % sizes.count])
    }
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    allocation_probe_reset()
    MallocInterposerSwift.hook()
    let stop = Locked(false)
    let changes = Locked(0)
    let control = Thread {
        var k = 0
        while !stop.load() {
            try? move(k)
            k += 1
            changes.add(1)
            usleep(30_000)
        }
    }
    control.start()
    allocation_probe_watch_this_thread(1)
    for cycle in 0..<10_000 { _ = try renderer.render(frames: sizes[cycle % sizes.count]) }
    allocation_probe_watch_this_thread(0)
    let lockWaits = allocation_probe_lock_waits()
    let frees = allocation_probe_frees()
    stop.store(true)
    while !control.isFinished { usleep(1000) }
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    emit([
        "cycles": 10_000, "renderThreadAllocations": allocation_probe_count(), "renderThreadBytes": allocation_probe_bytes(),
        "renderThreadLockWaits": lockWaits, "renderThreadFrees": frees, "changes": changes.load(),
    ])
}

/// Renders a graph with a file source of `seconds` to a WAV file; reports allocations and peak memory.
func renderFile(directory: String, seconds: Double) throws {
    let input = directory + "/long-\(Int(seconds)).wav"
    try writeTestFile(input, seconds: seconds, channels: 2)
    let graphJSON = """
        {"sampleRate": 48000, "channels": 2,
         "nodes": [{"id": "voice", "type": "file", "path": "\(input)"},
                   {"id": "beep", "type": "tone", "frequency": 440, "amplitude": 0.1},
                   {"id": "mix", "type": "mixer", "inputs": 2},
                   {"id": "trim", "type": "gain", "gain": -3}],
         "connections": [{"from": "voice", "to": "mix", "bus": 0}, {"from": "beep", "to": "mix", "bus": 1},
                         {"from": "mix", "to": "trim"}, {"from": "trim", "to": "output"}]}
        """
    let loaded = try GraphFile.load(json: graphJSON, maximumFrames: 1024)
    let renderer = FileRenderer(loaded: loaded, blockFrames: 1024, sampleFormat: .s16)
    MallocInterposerSwift.initialize()
    MallocInterposerSwift.hook()
    let result = try renderer.render(to: directory + "/out-\(Int(seconds)).wav")
    MallocInterposerSwift.unhook()
    let stats = MallocInterposerSwift.getStatistics()
    emit([
        "frames": result.frames, "allocations": stats.mallocCount, "bytes": stats.mallocBytesCount,
        "maxRSSKiB": maxRSSKiB(),
    ])
}

/// Marks the thread it renders on for the allocation count while armed, and passes its input through. The
/// device's real-time thread (JACK's process thread, the virtual device's thread) is not ours to start, so the
/// graph opts it in from inside the cycle; from the next cycle on, the whole cycle is watched — driver, capture
/// handler, graph, output copy.
final class ThreadTap: RenderUnit, @unchecked Sendable {
    // Unchecked Sendable: a probe: the canary mutex is a raw pthread_mutex_t; `stallEvery` set before the device starts
    let core: UnitCore
    let armed = Synchronization.Atomic<Bool>(false)
    /// Set for one cycle to allocate, free, lock and sleep on purpose: proves the counts see this thread.
    let canary = Synchronization.Atomic<Bool>(false)
    let watchedCycles = Synchronization.Atomic<Int>(0)
    /// While armed, every `stallEvery`-th cycle (0: never) holds the thread for `stallNanoseconds`, longer than
    /// the device buffer: an xrun, which this thread hands to the driver's recovery thread and waits for.
    var stallEvery = 0
    var stallNanoseconds: UInt64 = 40_000_000
    private let canaryLock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init(format: StreamFormat) {
        canaryLock.initialize(to: pthread_mutex_t())
        pthread_mutex_init(canaryLock, nil)
        core = UnitCore(kind: "tap", inputs: [format], outputs: [format])
    }

    func render(_ context: RenderContext) {
        context.output(0).copy(from: context.input(0))
        if armed.load(ordering: .acquiring) {
            allocation_probe_watch_this_thread(1)
            let n = watchedCycles.add(1, ordering: .relaxed).newValue
            if canary.exchange(false, ordering: .relaxed) {
                free(malloc(64))
                pthread_mutex_lock(canaryLock)
                pthread_mutex_unlock(canaryLock)
                var pause = timespec(tv_sec: 0, tv_nsec: 1000)
                nanosleep(&pause, nil)
            }
            if stallEvery > 0, n % stallEvery == 0 {
                let until = monotonicNanoseconds() + stallNanoseconds
                while monotonicNanoseconds() < until {}
            }
        } else {
            allocation_probe_watch_this_thread(0)
        }
    }
}

/// Ear monitoring as a karaoke app runs it, on a real device thread: the microphone (Int16 mono, as iOS capture
/// code takes it) goes to a MicrophoneSource's ring and, through an input node, into the voice chain of `graphPath`,
/// mixed with an accompaniment the scheduled file player plays (read ahead by the worker the render thread wakes;
/// the control thread seeks, pauses and resumes it), and out to
/// the device. A control thread moves every effect parameter, flips bypasses and mute, and a consumer drains
/// the microphone — pausing now and then so the ring overflows. Cycle timing is on. Counts the allocations on the
/// device thread.
func deviceCycles(
    directory: String, graphPath: String, backend: DeviceBackend, jackServer: String?, alsaDevices: (String, String)? = nil,
    voiceProcessing: Bool = false
) throws {
    let accompaniment = directory + "/accompaniment.wav"
    try writeTestFile(accompaniment, seconds: 20, channels: 2)
    let loaded = try GraphFile.load(path: graphPath, maximumFrames: 1024)
    let graph = loaded.graph
    guard let input = loaded.inputUnits.first?.unit, let last = loaded.nodes[loaded.nodeIDs.last ?? ""] else {
        throw AudioError(.invalidGraphDescription, "'\(graphPath)' needs an input node")
    }
    // Splice: last effect + accompaniment → mixer → tap → output.
    try graph.disconnect(graph.output)
    let mixer = try graph.addNode(MixerUnit(format: graph.format, inputs: 2), name: "mix")
    // The accompaniment through the scheduled file player: a 10 s region looped without end, which the control
    // thread seeks, pauses and resumes.
    let song = try FilePlayerUnit(path: accompaniment)
    try song.schedule(.init(startFrame: 0, frameCount: 480_000, loopCount: FilePlayerUnit.Region.endless))
    let file = try graph.addNode(song, name: "accompaniment")
    let tapUnit = ThreadTap(format: graph.format)
    let tap = try graph.addNode(tapUnit, name: "tap")
    try graph.connect(last, to: mixer, inputBus: 0)
    try graph.connect(file, to: mixer, inputBus: 1)
    // The mix recorded to a file on the way out, as a session records its song.
    let recorder = try RecorderUnit(format: graph.format, path: directory + "/song.wav")
    let record = try graph.addNode(recorder, name: "record")
    try graph.connect(mixer, to: record)
    try graph.connect(record, to: tap)
    try graph.connect(tap, to: graph.output)
    // The voice's pitch tracked beside the chain, as a karaoke session tracks it: a sink on the last effect.
    let pitchUnit = try PitchTrackerUnit(format: graph.format)
    let pitch = try graph.addNode(pitchUnit, name: "pitch")
    try graph.connect(last, to: pitch)
    try graph.addSink(pitch)

    let voice = try StreamFormat(sampleRate: graph.format.sampleRate, channelCount: 1, sampleType: .int16, interleaved: true)
    let virtualInput = directory + "/voice.wav"
    var configuration = IOUnit.Configuration(
        backend: backend, inputFormat: voice, outputFormat: graph.format, periodFrames: 128, periodCount: 2,
        reconnect: false, jackServer: jackServer)
    if backend == .jack {
        configuration.inputDevice = "self"
        configuration.outputDevice = "self"
    } else if backend == .pipewire {
        // The default sink and source of the server at this socket (jackServer carries it); PipeWire's data thread.
        configuration.pipeWireRemote = jackServer
    } else if backend == .alsa, let (input, output) = alsaDevices {
        // Through a sound server (ALSA's pulse plugin), with an xrun forced every 150 cycles: the hand-over of the
        // recovery is watched too.
        configuration.inputDevice = input
        configuration.outputDevice = output
        configuration.periodFrames = 256
        configuration.periodCount = 3
        tapUnit.stallEvery = 150
    } else {
        try writeTestFile(virtualInput, seconds: 30, channels: 1)
        configuration.inputDevice = virtualInput
        configuration.outputDevice = directory + "/speaker.wav"
        configuration.periodFrames = 256
        configuration.virtual = VirtualDeviceOptions(
            pacing: .asFastAsPossible, callbackSizes: .random(range: 1...512, seed: 11))
        // The capture on a clock 0.1 % fast: the I/O unit bridges the two clocks on the device thread too.
        configuration.virtual.inputClockRatio = 1.001
        // …and its playback stalls for 40 ms every 4 s of device time, so the bridge's resync runs too.
        configuration.virtual.playbackStall = .init(at: 2, seconds: 0.04, every: 4)
    }
    let io = try IOUnit(configuration)
    try io.setInputUnit(input)
    try io.setOutputGraph(graph)
    // The VoiceProcessingIO role: the unit on the capture, referenced to the output; its modes switch with the rest.
    let voiceUnit = voiceProcessing ? try io.enableVoiceProcessing() : nil
    try io.recordCycleTimings(capacity: 100_000)  // timing, as `monitor --timing` and the benchmarks use it
    let microphone = try MicrophoneSource(io: io, bufferedSeconds: 0.1)

    let consumerPaused = Locked(false)
    let consumed = Locked(0)
    let consumer = Task.detached {
        for await _ in microphone.buffers {
            consumed.add(1)
            while consumerPaused.load() { try? await Task.sleep(nanoseconds: 1_000_000) }
        }
    }
    let effects = loaded.nodeIDs.compactMap { loaded.units[$0] }.filter { !$0.parameters.isEmpty } + (voiceUnit.map { [$0] } ?? [])
    let stop = Locked(false)
    let changes = Locked(0)
    let control = Thread {
        var k = 0
        while !stop.load() {
            for (i, unit) in effects.enumerated() {
                for (j, p) in unit.parameters.enumerated() {
                    let r = p.spec.range
                    try? p.set(r.lowerBound + (r.upperBound - r.lowerBound) * Float((k * 7 + i * 3 + j * 5) % 11) / 10)
                }
                if (k + i) % 7 == 0 { unit.isBypassed.toggle() }
            }
            if k % 5 == 0 { microphone.isMuted.toggle() }
            // Seeks on the real-time backends only: a virtual device run as fast as it goes has no deadline and
            // waits (locks) for its file sources' next frames by design, which a seek asks for.
            if backend != .virtual, k % 10 == 3 { try? song.seek(toFrame: Int64(k * 4_801 % 480_000)) }
            if k % 13 == 0 { song.state == .paused ? song.resume() : song.pause() }
            // 150 ms of every 400 the consumer sleeps: longer than the ring's 100 ms, so it overflows.
            consumerPaused.store(monotonicNanoseconds() / 1_000_000 % 400 >= 250)
            k += 1
            changes.add(1)
            usleep(backend == .jack || backend == .pipewire ? 20_000 : 2_000)
        }
    }
    // Faults and other events to standard error: what a failed run's report alone would not say.
    let events = Task.detached { for await event in io.events { FileHandle.standardError.write(Data("event: \(event)\n".utf8)) } }
    defer { events.cancel() }
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    MallocInterposerSwift.hook()
    try microphone.start()
    control.start()
    func waitFor(cycles n: Int, changes c: Int = 0) {
        let deadline = monotonicNanoseconds() + 90_000_000_000
        while io.cycleCount < n || changes.load() < c, monotonicNanoseconds() < deadline { usleep(2000) }
    }
    // Warm-up: every path once (ramps, bypass fades, mute, overflow), then arm the tap and wait two cycles so
    // every later cycle is watched from its start.
    let realTime = backend != .virtual
    waitFor(cycles: realTime ? 750 : 1500, changes: 60)
    tapUnit.armed.store(true, ordering: .releasing)
    waitFor(cycles: io.cycleCount + 2)
    allocation_probe_reset()
    let measuredFrom = io.cycleCount
    let changesFrom = changes.load()
    let overflowsFrom = microphone.overflowCount
    let xrunsFrom = io.xrunCount
    let resyncsFrom = io.clockResyncs
    let controlsFrom = allocation_probe_device_controls()
    // With voice processing, 10,000 cycles (27 s at 128 frames): the count.
    waitFor(cycles: measuredFrom + (voiceProcessing ? 10_000 : realTime ? 1500 : 4000), changes: changesFrom + 100)
    let allocations = allocation_probe_count()
    let bytes = allocation_probe_bytes()
    let lockWaits = allocation_probe_lock_waits()
    let frees = allocation_probe_frees()
    let blockingCalls = allocation_probe_blocking_calls()
    let scopeEntries = allocation_probe_scope_entries()
    let measuredCycles = io.cycleCount - measuredFrom
    let measuredChanges = changes.load() - changesFrom
    let overflows = microphone.overflowCount - overflowsFrom
    let measuredXruns = io.xrunCount - xrunsFrom
    // After the xruns: every recovery counted above has asked its restarts by now (the xrun is counted first).
    let deviceControls = allocation_probe_device_controls() - controlsFrom
    let watchedDeviceControls = allocation_probe_watched_device_controls()
    let measuredResyncs = io.clockResyncs - resyncsFrom
    // The canary: one deliberate allocation, free and lock on the device thread must be counted.
    tapUnit.canary.store(true, ordering: .releasing)
    // The tap takes the canary in its next render: a device cycle may render no client cycle when the device's
    // rate is converted (libsoxr gives its output in blocks), so wait for the tap, not for device cycles.
    let canaryDeadline = monotonicNanoseconds() + 30_000_000_000
    while tapUnit.canary.load(ordering: .acquiring), monotonicNanoseconds() < canaryDeadline { usleep(2000) }
    waitFor(cycles: io.cycleCount + 2)
    let canary = allocation_probe_count() - allocations
    let lockCanary = allocation_probe_lock_waits() - lockWaits
    let freeCanary = allocation_probe_frees() - frees
    let blockingCanary = allocation_probe_blocking_calls() - blockingCalls
    tapUnit.armed.store(false, ordering: .releasing)
    waitFor(cycles: io.cycleCount + 2)
    stop.store(true)
    while !control.isFinished { usleep(1000) }
    let xruns = io.xrunCount
    let faults = io.faultCount
    let deviceRate = Int(io.grant?.sampleRate ?? 0)
    let clockShortfalls = io.clockShortfalls
    let bridgedClocks = io.clockRatio == nil ? 0 : 1
    let conversionShortfalls = io.conversionShortfalls
    let referenceShortfalls = io.captureReferenceShortfalls
    microphone.finish()
    MallocInterposerSwift.unhook()
    try recorder.finish()
    MallocInterposerSwift.setAllocationHook(nil)
    consumerPaused.store(false)
    let drained = DispatchSemaphore(value: 0)
    Task.detached {
        _ = await consumer.value
        drained.signal()
    }
    drained.wait()
    var pitchEstimates = 0
    pitchUnit.readEstimates { _ in pitchEstimates += 1 }
    emit([
        "pitchEstimates": pitchEstimates, "pitchDroppedFrames": pitchUnit.droppedFrames,
        "cycles": measuredCycles, "watchedCycles": tapUnit.watchedCycles.load(ordering: .relaxed),
        "deviceThreadAllocations": Int(allocations), "deviceThreadBytes": Int(bytes), "canaryAllocations": Int(canary),
        "deviceThreadLockWaits": Int(lockWaits), "deviceThreadFrees": Int(frees), "canaryLockWaits": Int(lockCanary),
        "canaryFrees": Int(freeCanary), "measuredXruns": measuredXruns,
        "deviceThreadBlockingCalls": Int(blockingCalls), "canaryBlockingCalls": Int(blockingCanary),
        "scopeEntries": Int(scopeEntries), "deviceControls": Int(deviceControls),
        "deviceThreadDeviceControls": Int(watchedDeviceControls),
        "changes": measuredChanges, "overflows": overflows, "consumed": consumed.load(), "xruns": xruns,
        "faults": faults, "deviceRate": deviceRate, "conversionShortfalls": conversionShortfalls,
        "clockShortfalls": clockShortfalls, "bridgedClocks": bridgedClocks, "measuredResyncs": measuredResyncs,
        "voiceProcessing": voiceUnit == nil ? 0 : 1, "referenceShortfalls": referenceShortfalls,
        "workerShortfalls": voiceUnit?.workerShortfalls ?? 0,
    ])
}

/// Runs `body` on a task and waits for it on this (non-pool) thread: the probe's sessions start and stop asynchronously.
func blocking(_ body: @escaping @Sendable () async throws(AudioError) -> Void) throws(AudioError) {
    let done = DispatchSemaphore(value: 0)
    let failure = Locked<AudioError?>(nil)
    Task.detached {
        do throws(AudioError) { try await body() } catch { failure.store(error) }
        done.signal()
    }
    done.wait()
    if let error = failure.load() { throw error }
}

/// A tiny atomic for the probe's own threads.
final class Locked<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ v: T) { value = v }
    func load() -> T { lock.withLock { value } }
    func store(_ v: T) { lock.withLock { value = v } }
}
extension Locked where T == Int {
    func add(_ d: Int) { lock.withLock { value += d } }
}

/// A flag a worker's handler reads (it need not be cheap: the handler runs on the worker thread).
final class Flag: @unchecked Sendable {
    let value = Synchronization.Atomic<Bool>(false)
}

/// The producer side of AAC encoding, as a capture callback drives it: pushes of 1–2048 frames, Int16 interleaved
/// (iOS capture code's format) and Float32 planar (the graph's), into two encoding workers whose consumers are
/// sometimes slow, so that the rings overflow as well as take. The pushing thread is watched once warmed up.
func encoderPushes() throws {
    let int16 = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true)
    let rawEncoder = try AACEncoder(settings: AACEncoderSettings(channelCount: 2, bitRate: 128_000), inputFormat: int16)
    let floatEncoder = try AACEncoder(settings: AACEncoderSettings(channelCount: 2, bitRate: 128_000))
    let slow = Flag()
    let handler: AACEncodingWorker.Handler = { _ in
        if slow.value.load(ordering: .relaxed) { usleep(20_000) }
    }
    let rawWorker = AACEncodingWorker(encoder: rawEncoder, bufferedSeconds: 0.2, slotFrames: 1024, handler: handler)
    let floatWorker = AACEncodingWorker(encoder: floatEncoder, bufferedSeconds: 0.2, slotFrames: 512, handler: handler)
    try rawWorker.start()
    try floatWorker.start()
    let raw = RawPCMBuffer(format: int16, capacity: 2048)
    let samples = raw.storage.assumingMemoryBound(to: Int16.self)
    for i in 0..<4096 { samples[i] = Int16(truncatingIfNeeded: i &* 7919) }
    let floats = PCMBuffer(channelCount: 2, capacity: 2048)
    for c in 0..<2 { for i in 0..<2048 { floats.view(frames: 2048)[c][i] = Float(sin(Double(i) * 0.05 + Double(c))) * 0.3 } }
    let report = Locked<[String: Int]>([:])
    let done = DispatchSemaphore(value: 0)
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    allocation_probe_reset()
    MallocInterposerSwift.hook()
    let producer = Thread {
        var generator = SystemRandomNumberGenerator()
        var time: Int64 = 0
        var accepted = 0
        var refused = 0
        func cycle() {
            // Mostly device-sized buffers, now and then a large one; paced at about 20 times real time.
            let n = Int.random(in: 0..<10, using: &generator) == 0
                ? Int.random(in: 513...2048, using: &generator) : Int.random(in: 1...512, using: &generator)
            if rawWorker.push(raw.view(frames: n), sampleTime: time) { accepted += 1 } else { refused += 1 }
            if floatWorker.push(floats.view(frames: n), sampleTime: time) { accepted += 1 } else { refused += 1 }
            time += Int64(n)
            usleep(UInt32(n))
        }
        for i in 0..<1000 {
            slow.value.store(i % 400 < 200, ordering: .relaxed)
            cycle()
        }
        allocation_probe_watch_this_thread(1)
        let before = allocation_probe_count()
        let pushes = 6000
        for i in 0..<pushes {
            slow.value.store(i % 1000 < 300, ordering: .relaxed)
            cycle()
        }
        let allocations = allocation_probe_count() - before
        let canaryStart = allocation_probe_count()
        free(malloc(64))
        let canary = allocation_probe_count() - canaryStart
        allocation_probe_watch_this_thread(0)
        report.store([
            "pushes": pushes * 2, "accepted": accepted, "refused": refused, "allocations": Int(allocations),
            "canary": Int(canary),
        ])
        done.signal()
    }
    producer.start()
    done.wait()
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    try rawWorker.finish()
    try floatWorker.finish()
    var fields = report.load()
    fields["overflows"] = rawWorker.overflows + floatWorker.overflows
    fields["packets"] = rawWorker.packetsEncoded + floatWorker.packetsEncoded
    emit(fields)
}

/// The live-stream session's audio path on a real device thread: the virtual device (as fast as it goes) feeds
/// the session's graph — input → eq → dynamics → limiter → tap — whose output is ramped by volume and mute and
/// pushed to the encoder worker, which writes FLV and M4A files on its own thread. A control thread moves the
/// volume and mute. Counts the allocations on the device thread (the tap marks it).
func streamSession(directory: String) throws {
    let voice = directory + "/voice.wav"
    try writeTestFile(voice, seconds: 120, channels: 1)
    let tapUnit = ThreadTap(format: try .graph(sampleRate: 48_000, channelCount: 2))
    var registry = UnitRegistry.standard
    registry.register("tap") { _ in tapUnit }
    let graphPath = directory + "/stream.json"
    try """
    {"sampleRate": 48000, "channels": 2, "nodes": [
      {"id": "mic", "type": "input", "channels": 1},
      {"id": "eq", "type": "eq", "bands": [{"type": "highPass", "frequency": 90, "q": 0.7071}]},
      {"id": "comp", "type": "dynamics", "threshold": -24, "ratio": 3},
      {"id": "limit", "type": "limiter", "ceiling": -1},
      {"id": "tap", "type": "tap"}],
     "connections": [{"from": "mic", "to": "eq"}, {"from": "eq", "to": "comp"}, {"from": "comp", "to": "limit"},
                     {"from": "limit", "to": "tap"}, {"from": "tap", "to": "output"}]}
    """.write(toFile: graphPath, atomically: true, encoding: .utf8)
    var configuration = LiveStreamSession.Configuration(
        input: .device(name: voice, backend: .virtual),
        outputs: [.file(directory + "/out.flv"), .file(directory + "/out.m4a")])
    configuration.graphPath = graphPath
    configuration.unitRegistry = registry
    configuration.virtualPacing = .asFastAsPossible
    configuration.periodFrames = 256
    let session = try LiveStreamSession(configuration)
    let stop = Locked(false)
    let changes = Locked(0)
    let control = Thread {
        var k = 0
        while !stop.load() {
            session.volume = Float(k % 5) / 4
            if k % 3 == 0 { session.isMuted.toggle() }
            k += 1
            changes.add(1)
            usleep(2_000)
        }
    }
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    MallocInterposerSwift.hook()
    try blocking { () async throws(AudioError) in try await session.start() }
    control.start()
    func waitFor(watched n: Int, changes c: Int = 0) {
        let deadline = monotonicNanoseconds() + 60_000_000_000
        while tapUnit.watchedCycles.load(ordering: .relaxed) < n || changes.load() < c, monotonicNanoseconds() < deadline {
            usleep(2000)
        }
    }
    func waitFor(frames: Int64) {
        let deadline = monotonicNanoseconds() + 60_000_000_000
        while Int64(session.statistics.seconds * 48_000) < frames, monotonicNanoseconds() < deadline { usleep(2000) }
    }
    waitFor(frames: 256 * 500)
    tapUnit.armed.store(true, ordering: .releasing)
    waitFor(watched: 2)
    allocation_probe_reset()
    let changesFrom = changes.load()
    waitFor(watched: 4000, changes: changesFrom + 100)
    let allocations = allocation_probe_count()
    let watched = tapUnit.watchedCycles.load(ordering: .relaxed)
    tapUnit.canary.store(true, ordering: .releasing)
    waitFor(watched: watched + 2)
    let canary = allocation_probe_count() - allocations
    tapUnit.armed.store(false, ordering: .releasing)
    stop.store(true)
    while !control.isFinished { usleep(1000) }
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    let summary = Locked<LiveStreamSession.Summary?>(nil)
    try blocking { () async throws(AudioError) in summary.store(await session.stop()) }
    emit([
        "watchedCycles": watched, "deviceThreadAllocations": Int(allocations), "canaryAllocations": Int(canary),
        "changes": changes.load() - changesFrom, "packets": summary.load()?.statistics.packetsEncoded ?? 0,
        "framesDropped": Int(summary.load()?.statistics.framesDropped ?? 0),
    ])
}

/// The whole karaoke session on JACK's dummy driver's thread, our outputs looped to our inputs: the song through a
/// time-pitch (+2 semitones), voice processing on the capture, a voice chain with a reverb, the monitor and song mixes,
/// four stem recorders, the song encoded to FLV and M4A, the route gate — while a control thread changes the volumes,
/// mutes, the key and the reverb, and pauses, resumes and seeks the song. The tap in the voice chain watches the
/// JACK thread from the cycle after it is armed.
/// The counts since the reset, for the cycles `tap` watched (less the two it began with), then one cycle with the
/// tap's canary — a deliberate allocation, free, lock and sleep — to show the counts see the thread; unarms the tap.
func watchedCounts(_ tap: ThreadTap, waitFor: (Int) -> Void) -> [String: Int] {
    let allocations = allocation_probe_count()
    let lockWaits = allocation_probe_lock_waits()
    let frees = allocation_probe_frees()
    let blockingCalls = allocation_probe_blocking_calls()
    let scopeEntries = allocation_probe_scope_entries()
    let watched = tap.watchedCycles.load(ordering: .relaxed) - 2
    tap.canary.store(true, ordering: .releasing)
    waitFor(tap.watchedCycles.load(ordering: .relaxed) + 2)
    let counts: [String: Int] = [
        "watchedCycles": watched, "deviceThreadAllocations": Int(allocations), "deviceThreadLockWaits": Int(lockWaits),
        "deviceThreadFrees": Int(frees), "deviceThreadBlockingCalls": Int(blockingCalls), "scopeEntries": Int(scopeEntries),
        "canaryAllocations": Int(allocation_probe_count() - allocations), "canaryLockWaits": Int(allocation_probe_lock_waits() - lockWaits),
        "canaryFrees": Int(allocation_probe_frees() - frees), "canaryBlockingCalls": Int(allocation_probe_blocking_calls() - blockingCalls),
    ]
    tap.armed.store(false, ordering: .releasing)
    return counts
}

func karaokeSession(directory: String, jackServer: String) throws {
    let song = directory + "/song.wav"
    try writeTestFile(song, seconds: 120, channels: 2)
    let tapUnit = ThreadTap(format: try .graph(sampleRate: 48_000, channelCount: 2))
    var registry = UnitRegistry.standard
    registry.register("tap") { _ in tapUnit }
    let chain = directory + "/chain.json"
    try """
    {"sampleRate": 48000, "channels": 2, "nodes": [
      {"id": "mic", "type": "input", "channels": 1},
      {"id": "eq", "type": "eq", "bands": [{"type": "highPass", "frequency": 90, "q": 0.7071}]},
      {"id": "comp", "type": "dynamics", "threshold": -24, "ratio": 3},
      {"id": "room", "type": "reverb", "wetDryMix": 20},
      {"id": "tap", "type": "tap"}],
     "connections": [{"from": "mic", "to": "eq"}, {"from": "eq", "to": "comp"}, {"from": "comp", "to": "room"},
                     {"from": "room", "to": "tap"}, {"from": "tap", "to": "output"}]}
    """.write(toFile: chain, atomically: true, encoding: .utf8)
    let stems = directory + "/stems"
    try FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true)
    var configuration = KaraokeSession.Configuration(song: song)
    configuration.voiceChain = chain
    configuration.unitRegistry = registry
    configuration.backend = .jack
    configuration.jackServer = jackServer
    configuration.inputDevice = "self"
    configuration.outputDevice = "self"
    configuration.periodFrames = 128
    configuration.keyCents = 200
    configuration.voiceProcessing = true
    configuration.stemsDirectory = stems
    configuration.outputs = [.file(directory + "/song.flv"), .file(directory + "/song.m4a")]
    configuration.roundTrip = .milliseconds(5)
    let session = try KaraokeSession(configuration)
    let stop = Locked(false)
    let changes = Locked(0)
    let control = Thread {
        var k = 0
        while !stop.load() {
            switch k % 8 {
            case 0: session.accompanimentVolume = -Double(k % 12)
            case 1: session.voiceVolume = -Double(k % 9)
            case 2: session.monitorVoiceVolume = k % 16 == 1 ? -.infinity : -3
            case 3: session.isVoiceMuted.toggle()
            case 4: try? session.setKey(cents: Double(k % 5) * 100 - 200)
            case 5: try? session.unit(named: "room")?.parameter("wetDryMix").set(Float(k % 60))
            case 6: session.isAccompanimentMuted = k % 48 == 6
            default:
                if k % 400 == 7 { try? session.seekSong(toSeconds: Double(k % 20)) }
                if k % 200 == 15 { session.pauseSong() } else if k % 200 == 23 { session.resumeSong() }
            }
            k += 1
            changes.add(1)
            usleep(2_000)
        }
    }
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    MallocInterposerSwift.hook()
    try blocking { () async throws(AudioError) in try await session.start() }
    let events = Task.detached { for await event in session.deviceEvents { FileHandle.standardError.write(Data("event: \(event)\n".utf8)) } }
    defer { events.cancel() }
    control.start()
    func waitFor(watched n: Int, changes c: Int = 0) {
        let deadline = monotonicNanoseconds() + 90_000_000_000
        while tapUnit.watchedCycles.load(ordering: .relaxed) < n || changes.load() < c, monotonicNanoseconds() < deadline {
            usleep(2000)
        }
    }
    // Warm-up: the song playing, every change made once.
    let warm = monotonicNanoseconds() + 30_000_000_000
    while session.player.currentTime < 1 || changes.load() < 200, monotonicNanoseconds() < warm { usleep(2000) }
    tapUnit.armed.store(true, ordering: .releasing)
    waitFor(watched: 2)
    allocation_probe_reset()
    let changesFrom = changes.load()
    let xrunsFrom = session.xruns
    waitFor(watched: 4002, changes: changesFrom + 100)
    let measuredChanges = changes.load() - changesFrom
    let xruns = session.xruns - xrunsFrom
    let counts = watchedCounts(tapUnit) { waitFor(watched: $0) }
    stop.store(true)
    while !control.isFinished { usleep(1000) }
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    let summary = Locked<KaraokeSession.Summary?>(nil)
    try blocking { () async throws(AudioError) in summary.store(await session.stop()) }
    emit(counts.merging([
        "changes": measuredChanges, "measuredXruns": xruns,
        "droppedFrames": Int(summary.load()?.droppedFrames ?? -1), "failed": summary.load()?.error == nil ? 0 : 1,
        "outputs": summary.load()?.outputs.count ?? 0,
    ]) { a, _ in a })
}

/// A room on JACK's dummy driver (128 frames) with a phone voice fed from another thread as the stage feeds it — its
/// clock read four times a second, 20 ms packets of 16-bit PCM stamped on its clock, a calibration's chirps played
/// meanwhile — while a take plays: the device thread's cycles (the phone voice's jitter buffer, the chirps, the
/// timeline's clock readings among them), 4000 watched, make no allocation, free, lock wait or blocking call.
func phoneRoom(directory: String, jackServer: String) throws {
    let song = directory + "/song.wav"
    try writeTestFile(song, seconds: 120, channels: 2)
    let tapUnit = ThreadTap(format: try .graph(sampleRate: 48_000, channelCount: 2))
    var registry = UnitRegistry.standard
    // The wired voice's chain gets the tap; the phone voice's copy of the chain a plain gain.
    let taps = Locked(0)
    registry.register("tap") { (f: inout NodeFields) throws(AudioError) -> any RenderUnit in
        taps.add(1)
        return taps.load() == 1 ? tapUnit : try GainUnit(format: f.format, gain: 0)
    }
    let chain = directory + "/chain.json"
    try """
    {"sampleRate": 48000, "channels": 2, "nodes": [
      {"id": "mic", "type": "input", "channels": 1},
      {"id": "eq", "type": "eq", "bands": [{"type": "highPass", "frequency": 90, "q": 0.7071}]},
      {"id": "tap", "type": "tap"}],
     "connections": [{"from": "mic", "to": "eq"}, {"from": "eq", "to": "tap"}, {"from": "tap", "to": "output"}]}
    """.write(toFile: chain, atomically: true, encoding: .utf8)
    var c = KaraokeRoom.Configuration()
    c.voiceChain = chain
    c.unitRegistry = registry
    c.backend = .jack
    c.jackServer = jackServer
    c.inputDevice = "self"
    c.outputDevice = "self"
    c.periodFrames = 128
    c.roundTrip = .milliseconds(5)
    c.phoneVoices = 1
    // A second: the feeder is an ordinary thread, and phase 1 runs the take under load beside this probe.
    c.phoneDelay = 1
    c.outputs = [.file(directory + "/room.m4a")]
    let room = try KaraokeRoom(c)
    let take = try KaraokeTake(KaraokeTake.Configuration(song: song), room: room)
    let phone = room.phoneVoices[0]
    MallocInterposerSwift.setAllocationHook(allocation_probe_hook)
    MallocInterposerSwift.hook()
    try blocking { () async throws(AudioError) in try await room.start(playing: take) }
    phone.connect()
    phone.setOffset(0.05)
    let stop = Locked(false)
    let packets = Locked(0)
    // The phone: its clock the host's plus 7 s; a 440 Hz tone in 20 ms packets, sent when captured.
    let feeder = Thread {
        func now() -> Double { Double(monotonicNanoseconds()) / 1000 }
        var sequence: UInt32 = 0
        var phase = 0.0
        var next = monotonicNanoseconds()
        var readings = 0
        while !stop.load() {
            next += 20_000_000
            while monotonicNanoseconds() < next { usleep(1000) }
            if readings % 5 == 0 {
                let sent = now()
                phone.clockReading(sentMicros: sent, phoneMicros: now() + 7_000_000, receivedMicros: now())
            }
            readings += 1
            var payload = [UInt8](repeating: 0, count: 960 * 2)
            for i in 0..<960 {
                let v = Int16(8000 * sin(phase))
                phase += 2 * Double.pi * 440 / 48_000
                payload[2 * i] = UInt8(truncatingIfNeeded: v)
                payload[2 * i + 1] = UInt8(truncatingIfNeeded: v >> 8)
            }
            let stamp = Int64(now() + 7_000_000 - 20_000)
            try? phone.audio(codec: .pcm16, payload: payload, sampleRate: 48_000, channelCount: 1, captureMicroseconds: stamp, sequence: sequence, isFirst: sequence == 0)
            sequence &+= 1
            packets.add(1)
        }
    }
    feeder.start()
    func waitFor(watched n: Int) {
        let deadline = monotonicNanoseconds() + 90_000_000_000
        while tapUnit.watchedCycles.load(ordering: .relaxed) < n, monotonicNanoseconds() < deadline { usleep(2000) }
    }
    // Warm-up: two seconds of the phone placed.
    let warm = monotonicNanoseconds() + 30_000_000_000
    while phone.report.counters.placed < 96_000, monotonicNanoseconds() < warm { usleep(2000) }
    tapUnit.armed.store(true, ordering: .releasing)
    waitFor(watched: 2)
    allocation_probe_reset()
    // The chirps played through the room's output while watched (the calibration itself fails: the phone is a tone).
    let calibration = Task.detached { _ = try? await phone.calibrate() }
    waitFor(watched: 4002)
    let counts = watchedCounts(tapUnit) { waitFor(watched: $0) }
    stop.store(true)
    while !feeder.isFinished { usleep(1000) }
    MallocInterposerSwift.unhook()
    MallocInterposerSwift.setAllocationHook(nil)
    try blocking { () async throws(AudioError) in _ = await calibration.value }
    let report = phone.report
    try blocking { () async throws(AudioError) in _ = await room.stop() }
    emit(counts.merging(["packets": packets.load(), "placed": report.counters.placed, "late": report.counters.late]) { a, _ in a })
}

let args = CommandLine.arguments
do {
    switch args.count > 2 ? args[1] : "" {
    case "render-cycles": try renderCycles(directory: args[2])
    case "loudness-history": try loudnessHistory()
    case "converter-sizes": try converterSizes()  // DIR unused
    case "voice-cycles": try voiceCycles()  // DIR unused
    case "encoder-pushes": try encoderPushes()
    case "stream-session": try streamSession(directory: args[2])
    case "karaoke-session" where args.count > 3: try karaokeSession(directory: args[2], jackServer: args[3])
    case "phone-room" where args.count > 3: try phoneRoom(directory: args[2], jackServer: args[3])
    case "render-file" where args.count > 3: try renderFile(directory: args[2], seconds: Double(args[3])!)
    case "device-cycles" where args.count > 5 && args[4] == "jack":
        try deviceCycles(
            directory: args[2], graphPath: args[3], backend: .jack, jackServer: args[5],
            voiceProcessing: args.count > 6 && args[6] == "voice")
    case "device-cycles" where args.count > 6 && args[4] == "alsa":
        try deviceCycles(directory: args[2], graphPath: args[3], backend: .alsa, jackServer: nil, alsaDevices: (args[5], args[6]))
    case "device-cycles" where args.count > 5 && args[4] == "pipewire":
        try deviceCycles(directory: args[2], graphPath: args[3], backend: .pipewire, jackServer: args[5])
    case "device-cycles" where args.count > 4 && args[4] == "virtual":
        try deviceCycles(directory: args[2], graphPath: args[3], backend: .virtual, jackServer: nil)
    default:
        FileHandle.standardError.write(Data("usage: AllocationProbe render-cycles DIR | voice-cycles DIR | render-file DIR SECONDS | device-cycles DIR GRAPH (jack SERVER [voice] | alsa INPUT OUTPUT | pipewire SOCKET | virtual) | encoder-pushes DIR | stream-session DIR | karaoke-session DIR JACK-SERVER | phone-room DIR JACK-SERVER | converter-sizes - | loudness-history -\n".utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("AllocationProbe: \(error)\n".utf8))
    exit(1)
}
