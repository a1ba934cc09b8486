import Foundation
import Testing
import TestSupport

/// What sessions cost the process and give back, measured in a process of their own (the SessionProbe), on JACK's
/// dummy driver and a local nginx-rtmp.
@Suite struct SessionResourceTests {
    /// A karaoke take on JACK with four stems, the song to M4A and to an RTMP server and a key change runs four threads
    /// of ours, each named la-*, whatever the core count: three besides the room's one background thread (`la-work`),
    /// and no event loops of NIO's own (the publishers' sockets are on `la-rtmp`, where NIO's shared group would start
    /// one loop per core); the same take on ALSA (PulseAudio's plugin) runs six: its device thread and its recovery
    /// thread besides; and a karaoke or live-stream session stopped in any state — made and never
    /// started, running (stopped twice), stopped while its start waits on a server that never answers, after a start
    /// that failed — leaves no thread and no file descriptor (a file, a socket to a server, a pipe) behind. Ten takes
    /// back to back in one room (stems, M4A and RTMP for the evening, a key change each): after the tenth the process
    /// has the threads, descriptors and (within 1 MB) the resident memory and heap it had after the first, and each
    /// finished take has been freed.
    @Test func aTakesThreadsAndWhatAStoppedSessionLeavesBehind() async throws {
        let jack = try await JACKServer.started(periodFrames: 256)
        defer { jack.stop() }
        let pulse = try await PulseAudioServer.started(sinks: ["mic", "spk"])
        defer { pulse.stop() }
        try pulse.keepMonitorAlive("mic")
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let silent = try SilentListener()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try writeWAV(dir.file("song.wav"), channels: [SignalCheck.testSignal(seconds: 10)[0]])
        let r = try await runTool(
            productsDirectory + "/SessionProbe",
            [dir.path, dir.file("song.wav"), jack.name, server.url("probe"), "\(silent.port)", "pulse:mic.monitor", "pulse:spk"],
            environment: pulse.environment)
        #expect(r.status == 0, "\(r.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], "\(r.stdout)")
        print("session probe: \(r.stdout)")
        #expect(report["error"] == nil, "\(report)")
        let threads = report["takeThreads"] as? [String] ?? []
        let ours = try #require(report["takeOurThreads"] as? Int)
        let work = try #require(report["takeWorkThreads"] as? Int)
        let processors = try #require(report["processors"] as? Int)
        #expect(work == 1, "\(work) la-work threads on \(processors) processors: \(threads)")
        #expect(ours - work >= 2 && ours - work <= 3, "\(ours - work) threads of ours besides la-work: \(threads)")
        #expect(ours <= 4, "\(ours) threads of ours: \(threads)")
        let onALSA = report["alsaTakeThreads"] as? [String] ?? []
        // A take the loaded sound server stalled is tried again (SessionProbe): what is judged is the take that ran.
        #expect(report["alsaTakeError"] as? String == "", "\(report)")
        if let attempts = report["alsaTakeAttempts"] as? Int, attempts > 1 { print("session probe: the ALSA take ran at attempt \(attempts)") }
        #expect(onALSA.count <= 6 && onALSA.contains("la-alsa-io") && onALSA.filter({ $0 == "la-work" }).count == 1,
                "the take on ALSA: \(onALSA)")
        #expect(!threads.contains { $0.hasPrefix("NIO-") }, "NIO's own event loops run: \(threads)")
        #expect(report["takeError"] as? String == "", "\(report)")
        #expect((report["takeRecorded"] as? Int ?? 0) > 48_000, "\(report)")
        let states = try #require(report["states"] as? [String: Any])
        for name in [
            "karaoke made, never started", "karaoke running, stopped twice", "karaoke stopped during start",
            "karaoke failed start, then stopped", "stream made, never started", "stream running, stopped",
            "stream stopped during start", "stream failed start, then stopped",
        ] {
            let left = try #require(states[name] as? [String: [String]], "\(name): \(states)")
            #expect(left["threads"] == [] && left["descriptors"] == [], "\(name) left \(left)")
        }
        // Ten takes in one room: the tenth leaves the threads, descriptors and memory the first left.
        let takes = try #require(report["roomTakes"] as? [[String: Any]], "\(report)")
        #expect(takes.count == 10 && report["roomError"] as? String == "" && report["roomTakeCount"] as? Int == 10, "\(report)")
        if takes.count == 10 {
            let (first, last) = (takes[0], takes[9])
            #expect(first["threads"] as? [String] == last["threads"] as? [String], "threads after take 1 and take 10: \(first) \(last)")
            #expect(first["descriptors"] as? Int == last["descriptors"] as? Int, "descriptors after take 1 and take 10: \(first) \(last)")
            let grown = (last["residentBytes"] as? Int ?? 0) - (first["residentBytes"] as? Int ?? 0)
            #expect(grown <= 1 << 20, "resident memory grew \(grown) bytes from take 1 to take 10")
            let heap = (last["heapInUse"] as? Int ?? 0) - (first["heapInUse"] as? Int ?? 0)
            #expect(heap <= 1 << 20, "the heap in use grew \(heap) bytes from take 1 to take 10")
            #expect(takes.allSatisfy { $0["previousTakeAlive"] as? Bool == false }, "a finished take was kept: \(takes)")
            #expect(takes.allSatisfy { ($0["recorded"] as? Int ?? 0) >= 48_000 && $0["error"] as? String == "" }, "\(takes)")
        }
        for name in ["karaoke", "stream"] {
            let error = states["\(name) stop during start: start's error"] as? String ?? ""
            #expect(error.contains("stopped while it started"), "\(name): \(error)")
            #expect(!(states["\(name) failed start: error"] as? String ?? "").isEmpty, "\(name): the start did fail")
        }
    }
}
