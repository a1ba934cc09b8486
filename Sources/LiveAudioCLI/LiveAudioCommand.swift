import ArgumentParser
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import LiveAudio

@main
struct LiveAudioCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "liveaudio",
        abstract: "Real-time audio for Linux: devices, monitoring, graphs of units, offline rendering, AAC encoding, file inspection.",
        subcommands: [
            Devices.self, Record.self, Play.self, Monitor.self, Karaoke.self, Latency.self, Render.self, Encode.self, Probe.self, Loudness.self, Stream.self, Info.self,
            Score.self, Pitch.self, Library.self, Scores.self,
        ]
    )

    static func main() async {
        // A file that outgrows the process's file size limit (ulimit -f) would otherwise kill the tool with SIGXFSZ,
        // leaving its files unfinished; ignored, the write fails with EFBIG and the command ends with a clear error.
        signal(SIGXFSZ, SIG_IGN)
        do {
            var command = try parseAsRoot(NormalizeOption.rewrite(Array(CommandLine.arguments.dropFirst())))
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// Prints `error` the way every subcommand reports failures, and exits with status 1.
func fail(_ error: AudioError) -> ExitCode {
    StandardStream.error("liveaudio: error: \(error.message) [\(error.code)]\n")
    return ExitCode(1)
}

struct Render: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Render a graph file offline into a WAV file.",
        discussion: """
            Without --duration, renders until every file source in the graph has ended. The output file appears \
            only if rendering succeeds: audio goes to a hidden temporary file beside it, which is written to the \
            disk and then renamed. Ctrl-C or SIGTERM stops the render and deletes the temporary file, leaving any \
            earlier file at the output path as it was.
            """)

    @Argument(help: "The graph file (JSON).")
    var graph: String

    @Option(name: .shortAndLong, help: "The WAV file to write.")
    var output: String

    @Option(help: "Seconds to render (default: until every file source has ended).")
    var duration: Double?

    @Option(name: .customLong("block-frames"), help: "Frames per render cycle (1 … 8192).")
    var blockFrames: Int = 1024

    @Option(name: .customLong("sample-format"), help: "Output samples: f32 (32-bit float) or s16 (16-bit integer).")
    var sampleFormat: String = "f32"

    @OptionGroup var loudness: NormalizeOptions

    func run() throws {
        do throws(AudioError) {
            guard let format = FileRenderer.OutputSampleFormat(rawValue: sampleFormat) else {
                throw AudioError(.invalidFormat, "--sample-format must be f32 or s16, got '\(sampleFormat)'")
            }
            guard (1...8192).contains(blockFrames) else {
                throw AudioError(.tooManyFrames, "--block-frames must be between 1 and 8192, got \(blockFrames)")
            }
            if let duration, !(duration.isFinite && duration >= 0 && duration <= 86_400) {
                throw AudioError(.invalidFormat, "--duration must be between 0 and 86400 seconds, got \(duration)")
            }
            let target = try loudness.target()
            let loaded = try GraphFile.load(path: graph, maximumFrames: max(blockFrames, 1))
            // With --normalize: rendered in 32-bit float to a hidden file beside the output, then normalised into a
            // second one that is renamed over the output (an earlier file there stays until then).
            let renderTo = target == nil ? output : FilePath.join(FilePath.folder(of: output), ".liveaudio-render-\(getpid()).wav")
            defer { if target != nil { unlink(renderTo) } }
            let renderer = FileRenderer(loaded: loaded, blockFrames: blockFrames, sampleFormat: target == nil ? format : .f32)
            let frames = duration.map { Int64(($0 * loaded.graph.format.sampleRate).rounded()) }
            let stop = StopFlag()
            let signals = StopSignals { stop.set() }
            defer { withExtendedLifetime(signals) {} }
            // On a terminal, how far it is (standard error); the total is known once the render has begun.
            var line: ProgressLine?
            defer { line?.clear() }
            let rate = loaded.graph.format.sampleRate
            let result = try renderer.render(to: renderTo, frames: frames, stopped: { stop.isSet }) { done, total in
                if line == nil { line = ProgressLine("rendering", total: Double(total) / rate) }
                line?.update(done: Double(done) / rate, force: done == total)
            }
            line?.clear()
            let speed = result.elapsed > 0 ? String(cFormat: "%.0fx real time", result.duration / result.elapsed) : ""
            let peak = result.peak > 0 ? String(cFormat: "%.1f dBFS", 20 * log10(Double(result.peak))) : "silent"
            if let target {
                let temporary = FilePath.join(FilePath.folder(of: output), ".liveaudio-normalized-\(getpid()).wav")
                defer { unlink(temporary) }
                let summary = try FileEncoding(
                    input: renderTo, output: temporary, bitrate: nil, channels: nil, sampleRate: nil, profile: "aac-lc",
                    sampleFormat: sampleFormat, normalize: target, truePeakCeiling: loudness.truePeak
                ).run(stop: stop)
                if stop.isSet {
                    throw AudioError(.invalidState, "stopped before the end: nothing was written to '\(output)'")
                }
                guard rename(temporary, output) == 0 else {
                    throw AudioError(.fileIO, "cannot rename the normalized file to '\(output)': \(String(cString: strerror(errno)))")
                }
                // The normalised file's own summary (its format, the gain), under the output's name.
                print(
                    summary.replacing(temporary, with: output) + "; rendered in " + String(cFormat: "%.3f s", result.elapsed)
                        + (speed.isEmpty ? "" : " (\(speed))"))
                return
            }
            print(
                "wrote \(output): \(result.format), \(result.frames) frames "
                    + String(cFormat: "(%.3f s)", result.duration) + ", peak \(peak), rendered in "
                    + String(cFormat: "%.3f s", result.elapsed) + (speed.isEmpty ? "" : " (\(speed))"))
        } catch {
            throw fail(error)
        }
    }
}

struct Info: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print an audio file's format and duration.")

    @Argument(help: "The audio file (WAV).")
    var file: String

    func run() throws {
        do throws(AudioError) {
            let info = try WAVFileReader.info(path: file)
            let f = info.format
            print("\(file): WAV, \(formatHz(f.sampleRate)), \(f.channelCount) channel\(f.channelCount == 1 ? "" : "s"), \(f.sampleType)")
            print("frames: \(info.frameCount)")
            print(String(cFormat: "duration: %.3f s", info.duration))
            if info.isTruncated {
                print("warning: the file is shorter than its header says (truncated); \(info.frameCount) whole frames are present")
            }
        } catch {
            throw fail(error)
        }
    }
}
