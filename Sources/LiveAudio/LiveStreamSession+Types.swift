import FoundationEssentials

/// The live stream's public types: where its audio comes from and goes, what it is made from, its figures.
extension LiveStreamSession {
    /// Where the session's audio comes from: a capture device or an audio file.
    public enum Input: Sendable, Hashable, CustomStringConvertible {
        /// A capture device: an ALSA PCM, a JACK client, or for `.virtual` a WAV file played as the microphone
        /// (nil: the default device).
        case device(name: String?, backend: DeviceBackend)
        /// Any audio file FFmpeg decodes, resampled to the session's rate; paced in real time unless `realTime`
        /// is false (then as fast as the encoder goes).
        case file(path: String, realTime: Bool)

        public var description: String {
            switch self {
            case .device(let name, let backend): "\(backend) device \(name ?? "(default)")"
            case .file(let path, let realTime): "file \(path)\(realTime ? " (real time)" : "")"
            }
        }
    }

    /// Where the encoded AAC goes: an RTMP server or a file. A session sends to any number at once.
    public enum Output: Sendable, Hashable, CustomStringConvertible {
        /// An RTMP or RTMPS server, published to as FLV audio.
        case rtmp(RTMPURL)
        /// An FLV, M4A/MP4 or ADTS (.aac) file, by extension.
        case file(String)

        /// An rtmp:// or rtmps:// URL, or a file name.
        /// - Throws: ``/AudioCore/AudioError`` `.invalidURL` for a bad URL, `.unsupportedFile` for an unknown
        ///   extension. The message never repeats the text beyond a URL's scheme or a file's extension: a mistyped
        ///   destination (`rtmp:/host/app/KEY`, `rtmpx://…`, `host/app/KEY`) still holds a stream key.
        public init(parsing text: String) throws(AudioError) {
            let lower = text.lowercased()
            if lower.hasPrefix("rtmp://") || lower.hasPrefix("rtmps://") {
                self = .rtmp(try RTMPURL(text))
            } else if let colon = text.firstIndex(of: ":"), text[colon...].hasPrefix(":/") {
                // A URL of another scheme, or a mistyped one: only a plausible scheme name is repeated.
                let scheme = text[..<colon]
                let plausible = scheme.count <= 16 && scheme.allSatisfy { $0.isLetter || $0.isNumber || "+-.".contains($0) }
                throw AudioError(
                    .invalidURL,
                    "cannot stream to \(plausible ? "a '\(scheme.lowercased()):/…' URL" : "that URL"): use rtmp://host/app/key, "
                        + "rtmps://…, or a .flv, .m4a, .mp4 or .aac file")
            } else {
                guard AACContainer(path: text) != nil else {
                    let name = text.split(separator: "/").last ?? ""
                    let ext = name.lastIndex(of: ".").map { String(name[$0...]) }
                    let shown = ext.map { "a file ending in '\($0.prefix(12))'" } ?? "a name without an extension"
                    throw AudioError(
                        .unsupportedFile,
                        "cannot stream to \(shown): a file name must end in .flv, .m4a, .mp4 or .aac, and a URL must "
                            + "start with rtmp:// or rtmps://")
                }
                self = .file(text)
            }
        }

        /// Destinations from a file: one per line; blank lines and lines starting with `#` are skipped, and
        /// spaces around each line are trimmed. The way to keep stream keys out of the command line (which every
        /// local user can read in /proc/PID/cmdline) and out of shell history.
        /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the file cannot be read, `.invalidParameter` when it
        ///   holds no destination, or what ``init(parsing:)`` throws for a line (naming the line, never its text).
        public static func parsingLines(of path: String) throws(AudioError) -> [Output] {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw AudioError(.fileIO, "cannot read the destinations file '\(path)'")
            }
            var outputs: [Output] = []
            for (n, line) in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let text = line.trimmingWhitespace()
                if text.isEmpty || text.hasPrefix("#") { continue }
                do throws(AudioError) {
                    outputs.append(try Output(parsing: text))
                } catch {
                    throw AudioError(error.code, "'\(path)' line \(n + 1): \(error.message)")
                }
            }
            guard !outputs.isEmpty else {
                throw AudioError(.invalidParameter, "the destinations file '\(path)' holds no destination")
            }
            return outputs
        }

        /// Safe to print: RTMP stream keys are hidden.
        public var description: String {
            switch self {
            case .rtmp(let url): url.description
            case .file(let path): path
            }
        }
    }

    /// Everything a session is made from; checked by ``LiveStreamSession/init(_:)``, read-only afterwards.
    public struct Configuration: Sendable {
        /// Where the audio comes from.
        public var input: Input
        /// A graph file with one node of type "input" where the input enters; nil: the input is encoded as is.
        public var graphPath: String?
        /// The node types the graph file may use (add your own units to the standard ones).
        public var unitRegistry = UnitRegistry.standard
        /// The session's rate, Hz, when there is no graph (default 48000; a graph sets its own).
        public var sampleRate: Double = 48_000
        /// The encoder's channel count when there is no graph (default 2; a graph sets its own).
        public var channelCount = 2
        /// Channels taken from the input. With a graph, its input node's; without, nil means 1 for a device (a
        /// microphone, upmixed) and the stream's channel count for a file.
        public var inputChannels: Int?
        /// The AAC bit rate, bits per second for all channels together (default 128000; 32000 … 320000, and no
        /// more than AAC carries at the rate and channel count).
        public var bitRate = 128_000
        /// Where the encoded audio goes; at least one is needed.
        public var outputs: [Output] = []
        /// Device buffering: frames per period asked of the device (default 1024).
        public var periodFrames = 1024
        /// Periods in the device buffer asked for (ALSA; default 3).
        public var periodCount = 3
        /// The JACK server's name for the `.jack` backend (nil: `JACK_DEFAULT_SERVER` or the default).
        public var jackServer: String?
        /// Reopen a device input after a fault until it returns or ``deviceReconnectTimeout`` passes (default true).
        public var reconnectDevice = true
        /// Seconds a device that went away is reopened for before the session gives up (see
        /// ``/AudioDevices/IOUnit/Configuration/reconnectTimeout``).
        public var deviceReconnectTimeout = 30.0
        /// For `.virtual` devices: pacing of the WAV file read as the microphone.
        public var virtualPacing: VirtualDeviceOptions.Pacing = .realTime
        /// Settings every RTMP output shares (queue, timeouts, reconnects, TLS).
        public var rtmp = RTMPPublisher.Configuration()
        /// Seconds of audio the encoder's input ring holds.
        public var encoderBufferSeconds = 2.0
        /// Where the encoder and the files' writing run: ``/AudioCore/WorkerPool/shared`` (two threads at most) unless
        /// given. A server running many sessions on many cores gives them a pool with more threads.
        public var workerPool = WorkerPool.shared

        /// A configuration with every other setting at its default.
        /// - Parameters:
        ///   - input: where the audio comes from.
        ///   - outputs: where the encoded audio goes (may be set later; a session needs at least one).
        public init(input: Input, outputs: [Output] = []) {
            self.input = input
            self.outputs = outputs
        }
    }

    /// What one output has done.
    public struct OutputStatistics: Sendable, CustomStringConvertible {
        /// The output these figures are for.
        public let output: Output
        /// For RTMP outputs.
        public let rtmp: RTMPStatistics?
        /// For files: packets written.
        public let packetsWritten: Int

        public var description: String {
            if let rtmp { "\(output): \(rtmp)" } else { "\(output): \(packetsWritten) packets" }
        }
    }

    /// The session's figures at one moment (``LiveStreamSession/statistics``).
    public struct Statistics: Sendable, CustomStringConvertible {
        /// Seconds of input taken in.
        public var seconds: Double
        /// AAC packets the encoder has made (each 1024 frames).
        public var packetsEncoded: Int
        /// Frames the encoder's ring had no room for (the encoder fell behind).
        public var framesDropped: Int64
        /// Blocks the graph could not render (silence was encoded in their place).
        public var renderFailures: Int
        /// Device under- and overruns (0 for a file input).
        public var xruns: Int
        /// Times the device was reopened after a fault (0 for a file input).
        public var deviceReconnects: Int
        /// Whether silence is being encoded (``LiveStreamSession/isMuted``).
        public var isMuted: Bool
        /// The linear gain after the graph, 0 … 4 (``LiveStreamSession/volume``).
        public var volume: Float
        /// Each output's figures, in the order configured (a file not yet opened by the start is left out).
        public var outputs: [OutputStatistics]
        /// The loudness of what is encoded (EBU R128): integrated, range and true peak since the start, momentary
        /// and short-term now.
        public var loudness: LoudnessReading

        public var description: String {
            var parts = [
                String(cFormat: "%7.1f s", seconds), "aac \(packetsEncoded) packets",
                "encoder drops \(framesDropped) frames", "xruns \(xruns)", loudness.statusText,
            ]
            if renderFailures > 0 { parts.append("render failures \(renderFailures)") }
            if isMuted { parts.append("muted") } else if volume != 1 { parts.append(String(cFormat: "volume %.2f", volume)) }
            var line = parts.joined(separator: ", ")
            for o in outputs { line += " | \(o)" }
            return line
        }
    }

    /// How a session ended.
    public struct Summary: Sendable {
        /// The figures at the stop.
        public let statistics: Statistics
        /// The first error of the encoder or a file output, if any.
        public let error: AudioError?
    }

    /// Peak and RMS levels (linear, 1 = full scale) since the previous reading.
    public struct Meters: Sendable, Hashable {
        /// What the input delivers (the microphone or the file), before the graph.
        public let input: MeterReading
        /// What is encoded: after the graph, the volume and the mute.
        public let output: MeterReading
        /// The loudness of what is encoded (the programme): not a reading since the previous one, but the meter's
        /// latest (momentary, short-term; integrated, range and true peak since the start).
        public let loudness: LoudnessReading
    }
}
