import Foundation
import Testing
import TestSupport

/// Runs the allocation probe with the malloc interposer preloaded and reads its JSON report. Waits off the
/// cooperative pool: a probe runs for up to half a minute, and other suites' async tests need the pool's threads.
func probe(_ arguments: [String], environment: [String: String] = [:]) async throws -> [String: Int] {
    let library = productsDirectory + "/libMallocInterposerSwift.so"
    // Counts lock waits and frees, and leaves a device library's own calls to the device (sync_probe.h); first, so
    // its free() forwards to the malloc interposer's.
    let syncProbe = productsDirectory + "/libLiveAudioSyncProbe.so"
    #expect(FileManager.default.fileExists(atPath: library), "the malloc interposer is built with the tests")
    #expect(FileManager.default.fileExists(atPath: syncProbe), "the sync probe is built with the tests")
    var env = environment
    env["LD_PRELOAD"] = syncProbe + ":" + library
    // An allocation on a watched thread prints its stack (the first two) to standard error, shown below.
    env["PROBE_TRACE"] = "1"
    let r = try await runTool(productsDirectory + "/AllocationProbe", arguments, environment: env)
    #expect(r.status == 0, "\(r.stderr)")
    if r.stderr.contains("[0x") { print("allocation probe \(arguments.first ?? ""): stacks of counted allocations:\n\(r.stderr.prefix(6000))") }
    let object = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Int]
    return try #require(object, "probe printed: \(r.stdout)")
}

/// The render thread's probe apart from the others, so that it runs beside them: the longest of them (minutes when
/// the whole phase runs at once), and it needs no device.
@Suite struct RenderAllocationTests {
    /// Every unit (file, player, tone, noise, mixer, gain, both kinds of render callback, a mono source on a
    /// stereo bus, a 44.1 kHz tone through a converter and a time-pitch) and every effect (eq, lowpass, highpass,
    /// bandpass, dynamics, reverb, delay, limiter), their parameters (the time-pitch's rate and pitch too) and
    /// bypasses moving all the time, at least 24,000 warmed-up cycles of odd sizes, half of them while another
    /// thread rebuilds the graph thousands of times: not one allocation or lock wait on the render thread.
    @Test func renderThreadNeverAllocates() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["render-cycles", dir.path])
        #expect(report["cycles"]! >= 24_000)
        #expect(report["changes"]! >= 1000)
        #expect(report["schedulesPublished"]! >= 1000, "the graph was swapped during the measured cycles")
        #expect(report["renderThreadAllocations"] == 0)
        #expect(report["renderThreadLockWaits"] == 0, "the sync probe counts lock waits (-1: not loaded)")
    }
}

@Suite(.serialized) struct AllocationTests {
    /// A converter pulled in sizes that made libsoxr grow its buffers mid-run when it was called with whatever each
    /// cycle needed (the first test saw it about one run in eight): six rate pairs, up and down by small and large
    /// factors, 30,000 cycles each after a warm-up — stretches of 1-frame cycles, random sizes, whole maxima — and
    /// not one allocation, free or lock wait on the render thread. A deliberate allocation among them is counted.
    @Test func converterNeverGrowsMidRun() async throws {
        let report = try await probe(["converter-sizes", "-"])
        #expect(report["cycles"] == 180_000, "\(report)")
        #expect(report["allocations"] == 0 && report["frees"] == 0 && report["lockWaits"] == 0, "\(report)")
        #expect(report["canary"] == 1, "the count sees the render thread: \(report)")
    }

    /// A stream's loudness meter over ten minutes of programme, read by another thread all the while: not one
    /// allocation, free or lock wait on the metering thread, and the heap in use the same after the tenth minute as
    /// after the first (the history is two fixed histograms and a 3 s ring, whatever the length of the run).
    @Test func loudnessMeterHistoryIsBounded() async throws {
        let report = try await probe(["loudness-history", "-"])
        #expect(report["seconds"] == 600 && report["reads"]! > 100, "\(report)")
        #expect(report["allocations"] == 0 && report["frees"] == 0 && report["lockWaits"] == 0, "\(report)")
        #expect(report["heapAfter1Minute"] == report["heapAfter10Minutes"], "\(report)")
        #expect(report["canary"]! >= 1, "the count sees the metering thread")
        #expect(report["integratedTimes100"]! < 0 && report["integratedTimes100"]! > -4000, "a loudness was measured: \(report)")
    }

    /// A voiceProcessing unit over 10,000 offline cycles of 1 … 4096 frames with its modes switching and levels
    /// moving from a control thread: nothing allocated or freed, and no lock taken, on the render thread. WebRTC's
    /// module locks a mutex of its own in every call, its setters included: it runs on the unit's worker thread,
    /// which the render thread feeds through fixed FIFOs (offline it sleeps while it waits for it, never locks).
    @Test func voiceProcessingRenderThread() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["voice-cycles", dir.path])
        #expect(report["cycles"] == 10_000)
        #expect(report["changes"]! >= 10, "the modes switched while rendering")
        #expect(report["renderThreadAllocations"] == 0 && report["renderThreadFrees"] == 0, "\(report)")
        #expect(report["renderThreadLockWaits"] == 0, "\(report)")
    }

    /// Handing PCM to the AAC encoder from a real-time thread: 12,000 pushes of 1–2048 frames, Int16 interleaved
    /// and Float32 planar, into encoding workers whose consumers are now fast, now slow — so pushes both land and
    /// overflow — without one allocation on the pushing thread. A deliberate allocation there is counted.
    @Test func encoderPushesNeverAllocate() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["encoder-pushes", dir.path])
        #expect(report["pushes"] == 12_000)
        #expect(report["accepted"]! > 1000 && report["refused"]! > 100, "\(report)")
        #expect(report["overflows"]! >= report["refused"]! && report["packets"]! > 100, "\(report)")
        #expect(report["allocations"] == 0, "\(report)")
        #expect(report["canary"]! >= 1, "the count sees the pushing thread")
    }

    /// The live-stream session's audio path on the virtual device's thread, as fast as it goes: graph, volume
    /// ramps and mute under a control thread's changes, pushes to the encoder worker (which also overflows) —
    /// without one allocation on that thread, while the worker writes FLV and M4A. A deliberate allocation there
    /// is counted.
    @Test func streamSessionNeverAllocatesOnTheDeviceThread() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["stream-session", dir.path])
        #expect(report["watchedCycles"]! >= 4000 && report["changes"]! >= 100, "\(report)")
        #expect(report["packets"]! > 100, "\(report)")
        #expect(report["deviceThreadAllocations"] == 0, "\(report)")
        #expect(report["canaryAllocations"]! >= 1, "the count sees the device thread")
    }

    /// Rendering a file offline: allocations and peak memory do not grow with the duration.
    @Test func fileRenderingDoesNotGrowWithDuration() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let short = try await probe(["render-file", dir.path, "5"])
        let long = try await probe(["render-file", dir.path, "120"])
        #expect(long["frames"] == 120 * 48_000 && short["frames"] == 5 * 48_000)
        // 24 times the cycles, the same allocations (setup only) and the same peak memory: within 8 MiB, where
        // keeping the output would take 22 MiB more (115 s of 16-bit stereo). On a quiet machine the two peaks are
        // within 0.3 MiB; a busy parallel test run has been seen to add 4 MiB of thread stacks and malloc arenas.
        #expect(abs(long["allocations"]! - short["allocations"]!) <= 8)
        #expect(long["maxRSSKiB"]! - short["maxRSSKiB"]! < 8192, "short \(short), long \(long)")
    }

    /// Ear monitoring on a real device thread — the JACK dummy driver's process thread at 128 frames, and the
    /// virtual device's thread with random 1–512-frame cycles as fast as it can go: the microphone in iOS capture code's
    /// Int16 to a MicrophoneSource ring (its consumer sleeping 150 ms of every 400, so it overflows), the voice chain of
    /// Examples/graphs/voice-chain.json mixed with a read-ahead accompaniment, effect parameters, bypasses and
    /// mute moving from a control thread — on JACK at the graph's rate, on JACK at 44.1 kHz (through the rate
    /// conversion), and on a virtual device whose capture clock runs 0.1 % fast (through the drift bridge) and whose
    /// playback stalls for 40 ms every 4 s (the bridge's resync), with a pitch tracker on the voice. Not one allocation on the device thread once
    /// warmed up; a deliberate allocation on that thread is counted, so the zero means something. The virtual
    /// device's wait for its file sources' read-ahead, run as fast as it goes (its pacing: a lock it shares with the
    /// read-ahead worker), is the device's own, as ALSA's and JACK's calls are; it is the one lock that thread takes,
    /// and the likeliest source of the single lock wait counted about once in fifteen runs under load.
    @Test func deviceThreadsNeverAllocate() async throws {
        let graph = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Examples/graphs/voice-chain.json").standardized.path
        let jack = try await JACKServer.started(periodFrames: 128)
        defer { jack.stop() }
        // A server at 44.1 kHz under the 48 kHz graph: the device thread runs the rate conversion too.
        let jack44 = try await JACKServer.started(periodFrames: 128, sampleRate: 44_100)
        defer { jack44.stop() }
        for (backend, minimumCycles) in [(["jack", jack.name], 1500), (["jack", jack44.name], 1500), (["virtual"], 4000)] {
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let report = try await probe(["device-cycles", dir.path, graph] + backend)
            #expect(report["cycles"]! >= minimumCycles, "\(backend)")
            #expect(report["watchedCycles"]! >= minimumCycles, "\(backend): the tap watched the device thread")
            #expect(report["pitchEstimates"]! >= 100 && report["pitchDroppedFrames"] == 0, "\(backend): the pitch tracker's worker kept up")
            #expect(report["changes"]! >= 100, "\(backend)")
            #expect(report["overflows"]! > 0, "\(backend): the full-ring path ran")
            #expect(report["consumed"]! > 0, "\(backend)")
            #expect(report["faults"] == 0, "\(backend)")
            #expect(report["canaryAllocations"]! >= 1, "\(backend): an allocation on the device thread is seen")
            #expect(report["canaryFrees"]! >= 1 && report["canaryLockWaits"]! >= 1, "\(backend): frees and locks are seen")
            #expect(report["deviceThreadAllocations"] == 0, "\(backend): \(report)")
            #expect(report["deviceThreadFrees"] == 0 && report["deviceThreadLockWaits"] == 0, "\(backend): \(report)")
            Self.expectNoBlockingCalls(report, minimumCycles: minimumCycles, "\(backend)")
            #expect(report["conversionShortfalls"] == 0, "\(backend): \(report)")
            if backend.last == jack44.name { #expect(report["deviceRate"] == 44_100, "the conversion ran: \(report)") }
            if backend == ["virtual"] {
                #expect(report["bridgedClocks"] == 1 && report["clockShortfalls"] == 0, "two clocks bridged: \(report)")
                #expect(report["measuredResyncs"]! >= 1, "the bridge resynced after a playback stall: \(report)")
            }
        }
    }

    /// The VoiceProcessingIO role on the JACK dummy driver's process thread at 128 frames, 10,000 cycles: the same monitoring run
    /// as above with a voiceProcessing unit on the capture, referenced to the output, its modes switching and levels
    /// moving from the control thread with the effects'. Not one allocation, free or lock on the device thread:
    /// the library (and its mutex) runs on the unit's worker thread, and the device thread never waits for it.
    @Test func jackThreadWithVoiceProcessing() async throws {
        let graph = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Examples/graphs/voice-chain.json").standardized.path
        let jack = try await JACKServer.started(periodFrames: 128)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["device-cycles", dir.path, graph, "jack", jack.name, "voice"])
        #expect(report["voiceProcessing"] == 1, "\(report)")
        #expect(report["cycles"]! >= 10_000 && report["watchedCycles"]! >= 10_000, "\(report)")
        #expect(report["changes"]! >= 100 && report["faults"] == 0, "\(report)")
        #expect(report["canaryAllocations"]! >= 1 && report["canaryFrees"]! >= 1 && report["canaryLockWaits"]! >= 1, "\(report)")
        #expect(report["deviceThreadAllocations"] == 0 && report["deviceThreadFrees"] == 0, "\(report)")
        #expect(report["referenceShortfalls"] == 0, "\(report)")
        #expect(report["deviceThreadLockWaits"] == 0, "\(report)")
        Self.expectNoBlockingCalls(report, minimumCycles: 10_000, "jack with voice processing")
    }

    /// The whole karaoke session on JACK's dummy driver's thread (128 frames, our outputs looped to our inputs): the
    /// song through a time-pitch, voice processing, a voice chain with a reverb, the mixes, four stem recorders, the
    /// song encoded to FLV and M4A and the route gate, while a control thread changes volumes, mutes, the key and
    /// the reverb and pauses, resumes and seeks the song — 4000 watched cycles: no allocation, free or lock wait.
    /// A deliberate allocation, free and lock on the thread are counted.
    @Test func karaokeSessionOnTheJACKThread() async throws {
        let jack = try await JACKServer.started(periodFrames: 128)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["karaoke-session", dir.path, jack.name])
        #expect(report["watchedCycles"]! >= 4000 && report["changes"]! >= 100, "\(report)")
        #expect(report["canaryAllocations"]! >= 1 && report["canaryFrees"]! >= 1 && report["canaryLockWaits"]! >= 1, "\(report)")
        #expect(report["deviceThreadAllocations"] == 0 && report["deviceThreadFrees"] == 0, "\(report)")
        #expect(report["deviceThreadLockWaits"] == 0, "\(report)")
        Self.expectNoBlockingCalls(report, minimumCycles: 4000, "karaoke on jack")
        #expect(report["failed"] == 0 && report["outputs"] == 2, "\(report)")
    }

    /// A room with a phone voice on JACK's dummy driver's thread (128 frames), the phone fed from another thread as
    /// the stage feeds it (clock readings, 20 ms PCM packets) and a calibration's chirps played while watched: 4000
    /// watched cycles with no allocation, free, lock wait or blocking call; the phone's audio was placed and none of it
    /// came late. A deliberate allocation, free and lock on the thread are counted.
    @Test func phoneVoiceOnTheJACKThread() async throws {
        let jack = try await JACKServer.started(periodFrames: 128)
        defer { jack.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["phone-room", dir.path, jack.name])
        #expect(report["watchedCycles"]! >= 4000, "\(report)")
        #expect(report["canaryAllocations"]! >= 1 && report["canaryFrees"]! >= 1 && report["canaryLockWaits"]! >= 1, "\(report)")
        #expect(report["deviceThreadAllocations"] == 0 && report["deviceThreadFrees"] == 0, "\(report)")
        #expect(report["deviceThreadLockWaits"] == 0, "\(report)")
        Self.expectNoBlockingCalls(report, minimumCycles: 4000, "a phone voice on jack")
        #expect(report["placed"]! > 96_000 && report["late"] == 0, "the phone's audio placed in time: \(report)")
    }

    /// The ALSA driver's own thread, through PulseAudio (the pulse plugin), with an xrun forced every 150 cycles
    /// (the tap holds the thread for 40 ms, longer than the buffer): the cycles and the hand-over of every recovery
    /// to the recovery thread make no allocation, free or lock wait of their own, and the recovery itself — drop,
    /// prepare, prime, start — runs on that thread, not this one. What ALSA and libpulse do inside their calls is
    /// the device's and is not counted; a deliberate allocation, free and lock on the thread are.
    @Test func alsaThreadNeverAllocatesOrLocksThroughXruns() async throws {
        let graph = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Examples/graphs/voice-chain.json").standardized.path
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        // Readers on both monitors: an idle null sink renders far ahead, and new streams on it wait for seconds.
        try pulse.keepMonitorAlive("mic")
        try pulse.keepMonitorAlive("spk")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(
            ["device-cycles", dir.path, graph, "alsa", "pulse:mic.monitor", "pulse:spk"], environment: pulse.environment)
        #expect(report["cycles"]! >= 1500 && report["watchedCycles"]! >= 1500, "\(report)")
        #expect(report["measuredXruns"]! >= 3, "xruns were recovered from while watched: \(report)")
        #expect(report["faults"] == 0, "\(report)")
        #expect(report["canaryAllocations"]! >= 1 && report["canaryFrees"]! >= 1 && report["canaryLockWaits"]! >= 1)
        #expect(report["deviceThreadAllocations"] == 0, "\(report)")
        #expect(report["deviceThreadFrees"] == 0, "\(report)")
        #expect(report["deviceThreadLockWaits"] == 0, "\(report)")
        Self.expectNoBlockingCalls(report, minimumCycles: 1500, "alsa through pulse")
        // The recoveries ran on the recovery thread: each drops, prepares and starts the two streams (six calls: the
        // pulse plugin's streams cannot be linked), and none of it on the device thread; the cycles above went on
        // through them.
        #expect(report["deviceControls"]! >= 4 * report["measuredXruns"]!, "the streams were restarted: \(report)")
        #expect(report["deviceThreadDeviceControls"] == 0, "no stream restarted on the device thread: \(report)")
    }

    /// No blocking system call (I/O, poll, sleep, yield, open, close, sockets, ioctl) in the I/O unit's handler of a
    /// device cycle — the scope the unit marks for the probe, which every watched cycle entered — while the canary's
    /// deliberate 1 µs sleep there is counted. The device's own waiting around the handler is its job: ALSA's poll
    /// inside its calls, JACK's between callbacks, the virtual device's file I/O and pacing.
    static func expectNoBlockingCalls(_ report: [String: Int], minimumCycles: Int, _ what: String) {
        // Counted from the reset, a cycle or two after the measured span begins.
        #expect(report["scopeEntries"]! >= minimumCycles - 10, "\(what): the handler's scope was marked: \(report)")
        #expect(report["canaryBlockingCalls"]! >= 1, "\(what): a sleep in the handler is seen: \(report)")
        #expect(report["deviceThreadBlockingCalls"] == 0, "\(what): \(report)")
    }
}

/// The allocation probe on PipeWire's data thread: the same monitoring run as on JACK's (the voice chain, a
/// read-ahead accompaniment, a pitch tracker, a microphone ring that overflows, effects and seeks moving from a control
/// thread) with our cycle called from the capture stream's process, at a 128-frame quantum. Not one allocation, free,
/// lock wait or blocking call in our cycle. Runs with the PipeWire tests (phase 4), against a server of its own.
@Suite struct PipeWireAllocationTests {
    @Test func pipeWireDataThreadNeverAllocates() async throws {
        let graph = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Examples/graphs/voice-chain.json").standardized.path
        let server = try await PipeWireServer.started(sinks: ["spk"], sources: ["mic"])
        defer { server.stop() }
        try server.forceQuantum(128)
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let report = try await probe(["device-cycles", dir.path, graph, "pipewire", server.remote])
        #expect(report["cycles"]! >= 1500 && report["watchedCycles"]! >= 1500, "\(report)")
        #expect(report["pitchEstimates"]! >= 100, "\(report)")
        #expect(report["changes"]! >= 100 && report["overflows"]! > 0 && report["consumed"]! > 0, "\(report)")
        #expect(report["faults"] == 0, "\(report)")
        #expect(report["canaryAllocations"]! >= 1 && report["canaryFrees"]! >= 1 && report["canaryLockWaits"]! >= 1, "\(report)")
        #expect(report["deviceThreadAllocations"] == 0, "\(report)")
        #expect(report["deviceThreadFrees"] == 0 && report["deviceThreadLockWaits"] == 0, "\(report)")
        AllocationTests.expectNoBlockingCalls(report, minimumCycles: 1500, "pipewire")
    }
}
