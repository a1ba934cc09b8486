import Foundation

/// A terminal a test uses as a person would: tmux runs a command in a detached session of a given size; the test reads
/// the screen, types keys, and may record every byte the command wrote (progress lines redrawn in place included).
/// The tmux server runs on a socket of its own and is killed by its PID when the test ends.
public final class TmuxTerminal: @unchecked Sendable {
    public let socket: String
    public let serverPID: pid_t
    private let directory: String

    /// Starts `command` (a shell command line) in `directory` on a `columns`×`rows` terminal. When `recording` is
    /// given, everything the command writes is appended to that file from its first byte. The pane stays after the
    /// command ends and shows `exit status N`.
    public init(command: String, directory: String, columns: Int = 120, rows: Int = 30, recording: String? = nil) throws {
        socket = "liveaudio-test-\(UUID().uuidString.prefix(8))"
        self.directory = directory
        let go = directory + "/.tmux-go"
        // The command waits for the test to say go, so a recording misses nothing.
        let script = "while [ ! -f '\(go)' ]; do sleep 0.02; done\n\(command)\necho exit status $?\nsleep 120\n"
        try script.write(toFile: directory + "/.tmux-run.sh", atomically: true, encoding: .utf8)
        // Started with no descriptor of this process besides the standard ones: the server tmux forks keeps what it
        // was given, and a pipe a test reads to its end would stay open for as long as the server lives.
        let starter = try ChildProcess(
            "tmux",
            ["-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "\(columns)", "-y", "\(rows)",
             "-c", directory, "sh .tmux-run.sh"],
            log: directory + "/.tmux-start.log")
        guard starter.wait(timeout: 10) == 0 else { throw SoundServerError("tmux did not start: \(starter.output)") }
        let pid = try Self.run(socket, ["display-message", "-p", "-t", "t", "#{pid}"])
        serverPID = pid_t(pid.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        if let recording {
            _ = try Self.run(socket, ["pipe-pane", "-o", "-t", "t", "cat >> '\(recording)'"])
        }
        _ = FileManager.default.createFile(atPath: go, contents: nil)
    }

    deinit { stop() }

    private static func run(_ socket: String, _ arguments: [String]) throws -> String {
        let r = try runProcess("tmux", ["-L", socket, "-f", "/dev/null"] + arguments)
        guard r.status == 0 else { throw SoundServerError("tmux \(arguments.first ?? ""): \(r.stderr)") }
        return r.stdout
    }

    /// What the terminal shows now.
    public func screen() throws -> String { try Self.run(socket, ["capture-pane", "-p", "-t", "t"]) }

    /// Types `keys` as they are (a space is a space).
    public func type(_ keys: String) throws { _ = try Self.run(socket, ["send-keys", "-t", "t", "-l", keys]) }

    /// True when the cursor is shown (a full-screen program that ended gave the terminal back).
    public var cursorShown: Bool { ((try? Self.run(socket, ["display-message", "-p", "-t", "t", "#{cursor_flag}"])) ?? "").hasPrefix("1") }

    /// Waits until the screen satisfies `ready`, polling every 0.1 s; throws with the last screen after `seconds`.
    public func waitFor(_ what: String, seconds: Double = 15, _ ready: (String) -> Bool) async throws -> String {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let text = try screen()
            if ready(text) { return text }
            guard Date() < deadline else { throw SoundServerError("the screen never showed \(what):\n\(text)") }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
    }

    /// Kills the server (and with it the command) by its PID.
    public func stop() {
        _ = try? Self.run(socket, ["kill-server"])
        if serverPID > 0 { kill(serverPID, SIGKILL) }
    }
}
