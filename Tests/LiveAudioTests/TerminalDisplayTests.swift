import Foundation
import Testing
import TestSupport

/// `render`, `encode` and `stream` on a terminal, as a person runs them: tmux is the terminal, and every byte the
/// commands write is recorded besides the screen.
@Suite(.serialized) struct TerminalDisplayTests {
    /// On a terminal each command shows a progress line — a bar, seconds done of the total and a percentage — redrawn
    /// in place on standard error, reaching 100 % (for `stream`, of its --duration, below its statistics lines), and
    /// takes it away when it ends: the screen keeps the commands' results and no progress line. Through a pipe the
    /// same commands write no progress at all.
    @Test func progressLinesOnATerminalAndNoneThroughAPipe() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let liveaudio = productsDirectory + "/liveaudio"
        let n = 20 * 48_000
        try writeWAV(dir.file("in.wav"), channels: [(0..<n).map { Float(0.25 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }])
        try """
            {"sampleRate": 48000, "channels": 1, "nodes": [{"id": "f", "type": "file", "path": "\(dir.file("in.wav"))"}],
             "connections": [{"from": "f", "to": "output"}]}
            """.write(toFile: dir.file("graph.json"), atomically: true, encoding: .utf8)
        let commands = [
            ["render", "graph.json", "-o", "rendered.wav"], ["encode", "in.wav", "-o", "encoded.m4a"],
            ["stream", "--input", "in.wav", "--to", "streamed.flv", "--duration", "2.5"],
        ]
        let line = commands.map { ([liveaudio] + $0).map { "'\($0)'" }.joined(separator: " ") }.joined(separator: " && ")
        let terminal = try TmuxTerminal(command: line, directory: dir.path, recording: dir.file("typescript"))
        defer { terminal.stop() }
        let screen = try await terminal.waitFor("the commands ending", seconds: 60) { $0.contains("exit status") }
        #expect(screen.contains("exit status 0"), "\(screen)")
        for result in ["wrote rendered.wav", "wrote encoded.m4a", "streamed "] {
            #expect(screen.contains(result), "\(result) is not on the screen:\n\(screen)")
        }
        for label in ["rendering [", "encoding [", "streaming ["] {
            #expect(!screen.contains(label), "a progress line was left on the screen:\n\(screen)")
        }
        let typescript = try String(contentsOfFile: dir.file("typescript"), encoding: .utf8)
        #expect(typescript.contains("rendering [##############################] 20.0 / 20.0 s 100%"), "\(typescript.suffix(2000))")
        #expect(typescript.contains("encoding [##############################] 20.0 / 20.0 s 100%"), "\(typescript.suffix(2000))")
        #expect(typescript.contains("streaming [") && typescript.contains(" / 2.5 s"), "\(typescript.suffix(2000))")
        #expect(typescript.contains("\r\u{1B}[K"), "the lines are not redrawn in place")

        for command in commands {
            let piped = try await runTool(liveaudio, command.map { a in [".json", ".wav", ".m4a", ".flv"].contains { a.hasSuffix($0) } ? dir.file(a) : a })
            #expect(piped.status == 0, "\(command): \(piped.stderr)")
            #expect(!piped.stderr.contains("[#") && !piped.stderr.contains("[-") && !piped.stdout.contains("\u{1B}["), "\(command): \(piped.stderr)")
        }
    }
}
