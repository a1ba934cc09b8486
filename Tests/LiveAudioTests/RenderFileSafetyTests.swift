import Foundation
import LiveAudio
import Testing
import TestSupport

/// The render's temporary file: created exclusively under a name no one can predict, on the disk before it is
/// renamed over the output, and deleted when the render is stopped.
@Suite struct RenderFileSafetyTests {
    var liveaudio: String { productsDirectory + "/liveaudio" }

    static let toneGraph = """
        {"sampleRate": 48000, "channels": 2,
         "nodes": [{"id": "beep", "type": "tone", "frequency": 440, "amplitude": 0.25}],
         "connections": [{"from": "beep", "to": "output"}]}
        """

    /// Another local user plants a link where the temporary file used to go (`.NAME.PID.partial`, a name anyone
    /// could predict): the render must not follow it, so the file it points at keeps its contents.
    @Test func aPlantedLinkIsNeverFollowed() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let victim = dir.file("precious.txt")
        try "keep me".write(toFile: victim, atomically: true, encoding: .utf8)
        let out = dir.file("out.wav")
        try FileManager.default.createSymbolicLink(atPath: dir.file(".out.wav.\(getpid()).partial"), withDestinationPath: victim)

        let loaded = try GraphFile.load(json: Self.toneGraph, maximumFrames: 512)
        let result = try FileRenderer(loaded: loaded, blockFrames: 512).render(to: out, frames: 4800)
        #expect(result.frames == 4800)
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep me")
        #expect(try FFmpeg.probe(out)["duration_ts"] == "4800")
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".partial") }
        #expect(left == [".out.wav.\(getpid()).partial"], "only the planted link is left: \(left)")
    }

    /// Temporary writers get a new name each time, and never open what is already there.
    @Test func temporaryNamesAreUniqueAndExclusive() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let format = try StreamFormat(sampleRate: 48_000, channelCount: 1, sampleType: .int16, interleaved: true)
        var names = Set<String>()
        for _ in 0..<50 {
            let w = try WAVFileWriter(temporaryBeside: dir.file("x.wav"), format: format)
            #expect(w.path.hasPrefix(dir.file(".x.wav.\(getpid()).")) && w.path.hasSuffix(".partial"), "\(w.path)")
            names.insert(w.path)
            w.abandon()
        }
        #expect(names.count == 50)
    }

    /// The order of the system calls, seen from outside with strace: the temporary file is fsynced, then renamed,
    /// and the folder is fsynced after the rename, so a crash never leaves the output name on a partial file.
    @Test func theFileIsOnTheDiskBeforeItIsRenamed() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.toneGraph.write(toFile: dir.file("g.json"), atomically: true, encoding: .utf8)
        let trace = dir.file("trace.txt")
        let r = try runProcess(
            "strace", ["-f", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2", "-o", trace,
                       liveaudio, "render", dir.file("g.json"), "-o", dir.file("out.wav"), "--duration", "0.5"])
        #expect(r.status == 0, "\(r.stderr)")
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").map(String.init)
        let syncs = lines.indices.filter { lines[$0].contains("fsync(") && lines[$0].hasSuffix("= 0") }
        let rename = lines.firstIndex { $0.contains("rename") && $0.contains("out.wav\"") && $0.hasSuffix("= 0") }
        #expect(rename != nil, "the output was renamed into place: \(lines)")
        if let rename {
            #expect(syncs.filter { $0 < rename }.count >= 1, "fsync before the rename: \(lines)")
            #expect(syncs.filter { $0 > rename }.count >= 1, "the folder fsynced after the rename: \(lines)")
        }
    }

    /// SIGTERM (or Ctrl-C) in the middle of a long render: the command ends with an error, the temporary file is
    /// gone, and the file already at the output path is as it was.
    @Test(arguments: [SIGTERM, SIGINT])
    func stoppedRenderLeavesNothingBehind(signal: Int32) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.toneGraph.write(toFile: dir.file("g.json"), atomically: true, encoding: .utf8)
        let out = dir.file("out.wav")
        try "an earlier take".write(toFile: out, atomically: true, encoding: .utf8)
        let liveaudio = self.liveaudio
        let log = dir.file("log.txt")
        let path = dir.path
        let (child, status) = try await offPool { () -> (ChildProcess, Int32) in
            // Ten hours at 48 kHz stereo: far more than the render gets through before the signal (and more than a
            // WAV file holds, so a render that ignored the signal would fail, not finish).
            let child = try ChildProcess(liveaudio, ["render", path + "/g.json", "-o", out, "--duration", "36000"], log: log)
            let deadline = Date().addingTimeInterval(30)
            func partials() -> [String] {
                ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter { $0.hasSuffix(".partial") }
            }
            while Date() < deadline, partials().isEmpty { usleep(2000) }
            usleep(200_000)
            guard child.isRunning else { return (child, -1) }
            kill(child.pid, signal)
            return (child, child.wait(timeout: 20))
        }
        defer { child.stop(signal: SIGKILL) }
        #expect(status != -1, "the render ended before it could be stopped")
        #expect(status == 1, "exit status \(status)")
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(output.contains("stopped before the end"), "\(output)")
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".partial") }
        #expect(left.isEmpty, "temporary files left: \(left)")
        #expect(try String(contentsOfFile: out, encoding: .utf8) == "an earlier take")
    }
}
