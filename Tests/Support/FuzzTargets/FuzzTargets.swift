import Foundation
import LiveAudio
import LiveAudioStage

#if canImport(Glibc)
import Glibc
#endif

/// The fuzz targets: every parser that reads bytes LiveAudio does not control, each with the invariants it promises
/// checked on every input — round trips through the writer where one exists, not only "does not crash". A broken
/// invariant stops the process (`fatalError`), which libFuzzer records as a crash with its input.
///
/// The same code runs under libFuzzer (`make fuzz`, the `LiveAudioFuzz` executable built with
/// `-sanitize=fuzzer,address`) and in `make test`, which replays the seed corpora and every regression input
/// (`Fuzz/regressions/TARGET/`) through it.
public enum FuzzTarget: String, CaseIterable, Sendable {
    case wav, adts, audioSpecificConfig, flv, amf0, amf3, chunkStream, handshake, commands, rtmpURL, graphFile, decoder, chart, stageControl,
        eveningRequest, phoneAudio

    /// Runs one input. Errors are the expected answer to most inputs; a broken invariant is a fatal error.
    public func run(_ bytes: [UInt8]) {
        switch self {
        case .wav: Self.wav(bytes)
        case .adts: Self.adts(bytes)
        case .audioSpecificConfig: Self.audioSpecificConfig(bytes)
        case .flv: Self.flv(bytes)
        case .amf0: Self.amf0(bytes)
        case .amf3: Self.amf3(bytes)
        case .chunkStream: Self.chunkStream(bytes)
        case .handshake: Self.handshake(bytes)
        case .commands: Self.commands(bytes)
        case .rtmpURL: Self.rtmpURL(bytes)
        case .graphFile: Self.graphFile(bytes)
        case .decoder: Self.decoder(bytes)
        case .chart: Self.chart(bytes)
        case .stageControl: Self.stageControl(bytes)
        case .eveningRequest: Self.eveningRequest(bytes)
        case .phoneAudio: Self.phoneAudio(bytes)
        }
    }

    static func check(_ condition: @autoclosure () -> Bool, _ what: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
        if !condition() { fatalError("fuzz invariant broken: \(what())", file: file, line: line) }
    }

    // MARK: Files

    /// A scratch folder of this process's own (in /dev/shm where it exists: no disk writes per input), with a folder
    /// per target: targets run side by side in the tests, and a playlist the decoder reads must not find another
    /// target's file. Removed when the process exits.
    static let scratch: String = {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        let dir = "\(base)/liveaudio-fuzz-\(getpid())"
        for target in FuzzTarget.allCases {
            try? FileManager.default.createDirectory(atPath: "\(dir)/\(target.rawValue)", withIntermediateDirectories: true)
        }
        atexit { try? FileManager.default.removeItem(atPath: FuzzTarget.scratch) }
        return dir
    }()

    static func write(_ bytes: [UInt8], to name: String) -> String {
        let path = "\(scratch)/\(name)"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { fatalError("fuzz: cannot write \(path): errno \(errno)") }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, bytes.count - done) }
            guard n > 0 else { fatalError("fuzz: cannot write \(path): errno \(errno)") }
            done += n
        }
        return path
    }

    /// Samples of a reader, at most `limit` frames (a header may promise far more than the input holds).
    static func readAll(
        channels: Int, limit: Int, chunkFrames: Int = 1024, _ read: (BufferView) throws(AudioError) -> Int
    ) throws(AudioError) -> [[Float]] {
        let room = max(1, min(chunkFrames, limit))
        let chunk = PCMBuffer(channelCount: channels, capacity: room)
        var out = [[Float]](repeating: [], count: channels)
        while out[0].count < limit {
            let n = try read(chunk.view(frames: min(room, limit - out[0].count)))
            check(n >= 0 && n <= room, "a read returned \(n) frames for room of \(room)")
            if n == 0 { break }
            let view = chunk.view(frames: n)
            for c in 0..<channels { out[c].append(contentsOf: view[c]) }
        }
        return out
    }

    static func sameSamples(_ a: [[Float]], _ b: [[Float]]) -> Bool {
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) {
            guard x.count == y.count else { return false }
            for (p, q) in zip(x, y) where !(p == q || (p.isNaN && q.isNaN)) { return false }
        }
        return true
    }

    // MARK: WAV

    /// The header's promises (frames within the file, truncation flagged), every promised frame read and no more,
    /// integer samples in [−1, 1), and a round trip: what was read, written in the same format and read back, is the
    /// same samples.
    static func wav(_ bytes: [UInt8]) {
        let path = write(bytes, to: "wav/input.wav")
        let reader: WAVFileReader
        do { reader = try WAVFileReader(path: path) } catch { return }
        let info = reader.info
        check(info.frameCount >= 0, "negative frame count \(info.frameCount)")
        check(
            info.dataOffset + info.frameCount * Int64(info.format.bytesPerFrame) <= Int64(bytes.count),
            "\(info.frameCount) frames of \(info.format.bytesPerFrame) bytes from \(info.dataOffset) in \(bytes.count) bytes")
        let samples: [[Float]]
        // As many frames as the file holds, in chunks no larger.
        let frames = Int(info.frameCount)
        let room = max(1, min(1024, frames))
        do { samples = try readAll(channels: info.format.channelCount, limit: frames, chunkFrames: room) { v throws(AudioError) in try reader.read(into: v) } } catch {
            fatalError("fuzz invariant broken: a WAV file whose header was read fails to read: \(error)")
        }
        check(samples[0].count == frames, "read \(samples[0].count) of \(frames) frames")
        let past = PCMBuffer(channelCount: info.format.channelCount, capacity: 1)
        check((try? reader.read(into: past.view(frames: 1))) == 0, "a read past the end returned frames")
        // Integers scale into [−1, 1) exactly, but a 32-bit one near full scale rounds to 1.0 as a Float.
        if info.format.sampleType != .float32 {
            for channel in samples { for s in channel { check(s >= -1 && s <= 1, "integer sample \(s) outside [-1, 1]") } }
        }
        let copy = "\(scratch)/wav/copy.wav"
        do {
            let writer = try WAVFileWriter(path: copy, format: info.format, chunkFrames: room)
            let buffer = PCMBuffer(channelCount: info.format.channelCount, capacity: max(1, frames))
            for c in 0..<samples.count { for (i, s) in samples[c].enumerated() { buffer.storage[c * buffer.channelStride + i] = s } }
            try writer.write(buffer.view(frames: frames))
            try writer.finish()
            let again = try WAVFileReader(path: copy)
            check(again.format == info.format, "the copy's format \(again.format) is not \(info.format)")
            let back = try readAll(channels: info.format.channelCount, limit: frames + 1, chunkFrames: room) { v throws(AudioError) in try again.read(into: v) }
            check(sameSamples(samples, back), "the WAV round trip changed the samples")
        } catch {
            fatalError("fuzz invariant broken: writing back what was read failed: \(error)")
        }
    }

    // MARK: AAC framing

    /// A stream that parses adds up to its bytes (ID3 tag aside, checked by the file path too), every header is
    /// within its ranges and encodes back to itself, and the file check (a window over the file) agrees with the
    /// in-memory parse.
    static func adts(_ bytes: [UInt8]) {
        // Each header at every offset: the header parser alone.
        if bytes.count >= ADTSHeader.size, let h = try? ADTSHeader(parsing: bytes) {
            check((1...4).contains(h.objectType) && (0...7).contains(h.channelConfiguration), "header \(h)")
            check(h.frameLength >= ADTSHeader.size && h.frameLength <= 8191, "frame length \(h.frameLength)")
            if let again = try? h.encoded() {
                check((try? ADTSHeader(parsing: again)) == h, "an ADTS header does not survive encoding: \(h)")
            }
        }
        let memory = Result { () throws(AudioError) in try ADTSStream.frames(in: bytes) }
        if case .success(let frames) = memory {
            let total = frames.reduce(0) { $0 + $1.frameLength }
            check(total <= bytes.count, "frames of \(total) bytes in \(bytes.count)")
            if let first = frames.first {
                check(frames.allSatisfy { $0.sampleRate == first.sampleRate && $0.channelConfiguration == first.channelConfiguration }, "mixed frames")
            }
        }
        let path = write(bytes, to: "adts/input.aac")
        let file = Result { () throws(AudioError) in try ADTSStream.check(path: path) }
        switch (memory, file) {
        case (.success(let frames), .success(let summary)):
            check(frames.count == summary.frameCount, "in memory \(frames.count) frames, from the file \(summary.frameCount)")
            check(frames.first == summary.first, "the first frame differs")
        case (.failure(let a), .failure(let b)):
            check(a.code == b.code, "in memory \(a), from the file \(b)")
        default:
            fatalError("fuzz invariant broken: the in-memory and file ADTS parsers disagree: \(memory) / \(file)")
        }
    }

    /// A config that parses has a rate and a channel layout in range, and encodes back to itself.
    static func audioSpecificConfig(_ bytes: [UInt8]) {
        guard let config = try? AudioSpecificConfig(parsing: bytes) else { return }
        // A rate from the table, or an explicit 24-bit one (any the standard can write).
        check(config.sampleRate >= 1 && config.sampleRate <= 0xFF_FFFF, "rate \(config.sampleRate)")
        check((0...7).contains(config.channelConfiguration) && config.objectType > 0, "config \(config)")
        if let encoded = try? config.encoded() {
            check((try? AudioSpecificConfig(parsing: encoded)) == config, "\(config) does not survive encoding")
        }
    }

    // MARK: FLV and AMF

    /// A file that parses is its header and tags back to back (sizes add up), writes back to a file that parses to
    /// the same header, tags and metadata, and the file check (a window over the file) agrees with the parse.
    static func flv(_ bytes: [UInt8]) {
        let parsed = Result { () throws(AudioError) in try FLVContents(parsing: bytes) }
        if case .success(let contents) = parsed {
            let tagBytes = contents.tags.reduce(0) { $0 + FLVTag.headerSize + $1.data.count + 4 }
            check(tagBytes <= bytes.count - FLVHeader.size - 4, "tags of \(tagBytes) bytes in \(bytes.count)")
            let rewritten = contents.header.encoded() + contents.tags.flatMap { $0.encoded() }
            guard let again = try? FLVContents(parsing: rewritten) else {
                fatalError("fuzz invariant broken: an FLV file written from a parsed one does not parse")
            }
            check(again.header == contents.header && again.tags == contents.tags, "the FLV round trip changed the tags")
            check(again.metadata.map { AMF0.encode([$0]) } == contents.metadata.map { AMF0.encode([$0]) }, "the metadata changed")
            for tag in contents.tags where tag.type == .audio {
                if let aac = try? FLVAudio.parseAAC(tag.data) {
                    check(aac.payload.count == tag.data.count - 2, "an AAC tag's payload of \(aac.payload.count) in \(tag.data.count)")
                }
            }
        }
        let path = write(bytes, to: "flv/input.flv")
        let checked = Result { () throws(AudioError) in try FLVContents.check(path: path) }
        switch (parsed, checked) {
        case (.success(let contents), .success(let summary)):
            check(contents.tags.count == summary.tagCount && contents.header == summary.header, "the FLV check counts \(summary.tagCount) tags, the parse \(contents.tags.count)")
            check(contents.tags.filter { $0.type == .audio }.count == summary.audioTagCount, "audio tags differ")
        case (.failure(let a), .failure(let b)):
            // An empty file is "empty" to the file check and "not FLV" to the byte parser: both say why.
            check(a.code == b.code || bytes.isEmpty, "FLV parse \(a), check \(b)")
        default:
            fatalError("fuzz invariant broken: the FLV parse and check disagree: \(parsed) / \(checked)")
        }
    }

    /// Encoded sizes above this are not round-tripped: references may legitimately expand a small input a lot.
    static let roundTripLimit = 1 << 20

    /// Decoding what was encoded from a decode gives the same bytes again (`==` is not used: NaN is not equal to
    /// itself), and the reader never claims more bytes than it was given.
    static func amf0(_ bytes: [UInt8]) {
        var reader = AMF0Reader(bytes)
        while !reader.atEnd {
            guard (try? reader.value()) != nil else { break }
            check(reader.offset <= bytes.count, "the AMF0 reader is at \(reader.offset) of \(bytes.count)")
        }
        guard let values = try? AMF0.decodeAll(bytes) else { return }
        roundTrip(values, "AMF0")
    }

    static func amf3(_ bytes: [UInt8]) {
        guard let values = try? AMF3Reader.decodeAll(bytes) else { return }
        roundTrip(values, "AMF3")
    }

    static func roundTrip(_ values: [AMF0Value], _ what: String) {
        let once = AMF0.encode(values)
        guard once.count <= roundTripLimit else { return }
        guard let decoded = try? AMF0.decodeAll(once) else {
            fatalError("fuzz invariant broken: AMF0 written from decoded \(what) does not decode")
        }
        check(AMF0.encode(decoded) == once, "\(what): encode(decode(encode(x))) differs from encode(x)")
    }

    // MARK: RTMP

    /// The publisher's decoder limits (RTMPConnection.makeDecoder).
    static func publisherDecoder() -> ChunkStreamDecoder {
        var decoder = ChunkStreamDecoder()
        decoder.maximumMessageLength = 256 << 10
        decoder.maximumPartialBytes = 2 << 20
        decoder.maximumChunkStreams = 64
        return decoder
    }

    enum Outcome: Equatable {
        case messages([RTMPMessage])
        case failed([RTMPMessage], AudioError.Code)
    }

    static func decode(_ pieces: [ArraySlice<UInt8>]) -> Outcome {
        var decoder = publisherDecoder()
        var messages: [RTMPMessage] = []
        for piece in pieces {
            decoder.append(piece)
            while true {
                do {
                    guard let (message, _) = try decoder.nextMessage() else { break }
                    check(message.payload.count <= decoder.maximumMessageLength, "a \(message.payload.count)-byte message")
                    messages.append(message)
                } catch {
                    return .failed(messages, error.code)
                }
            }
        }
        return .messages(messages)
    }

    /// The same messages and the same error whether the bytes come at once or in pieces (as TCP cuts them), payloads
    /// within the limits and no more than what came in, and the messages, encoded again in chunks of another size,
    /// decode to themselves.
    static func chunkStream(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        let whole = decode([bytes[...]])
        // Cut where the first byte says (a different cut per input).
        let step = Int(bytes[0]) % 97 + 1
        let pieces = stride(from: 0, to: bytes.count, by: step).map { bytes[$0..<min(bytes.count, $0 + step)] }
        check(decode(pieces) == whole, "the chunk decoder answers differently when the bytes come in pieces of \(step)")
        let messages: [RTMPMessage]
        switch whole {
        case .messages(let m), .failed(let m, _): messages = m
        }
        let total = messages.reduce(0) { $0 + $1.payload.count }
        check(total <= bytes.count, "\(total) payload bytes from \(bytes.count)")
        // Re-encode what is not chunk-size control (the encoder sets the chunk size itself).
        let plain = messages.filter { $0.type != .setChunkSize && $0.type != .abort }
        guard !plain.isEmpty else { return }
        var encoder = ChunkStreamEncoder()
        var out = encoder.setChunkSizeMessage(step * 13 + 1)
        for (i, m) in plain.enumerated() { encoder.encode(m, chunkStream: UInt32(3 + i % 5), into: &out) }
        var decoder = ChunkStreamDecoder()
        decoder.append(out)
        var back: [RTMPMessage] = []
        do {
            while let (m, _) = try decoder.nextMessage() { if m.type != .setChunkSize { back.append(m) } }
        } catch {
            fatalError("fuzz invariant broken: re-encoded messages do not decode: \(error)")
        }
        check(back == plain, "re-encoded messages decode to others")
    }

    /// What the publisher reads from a server: S0+S1+S2, then chunks. C2 is S1 exactly; a bad S0 is the only
    /// handshake error; what follows goes through the decoder and the command parser as on a connection.
    static func handshake(_ bytes: [UInt8]) {
        let handshake = RTMPHandshake(time: 0)
        guard bytes.count >= RTMPHandshake.s0s1Size else { return }
        let c2: [UInt8]
        do { c2 = try handshake.c2(answering: bytes[...]) } catch {
            check(bytes[0] != RTMPHandshake.version && error.code == .protocolError, "handshake error \(error) with S0 \(bytes[0])")
            return
        }
        check(bytes[0] == RTMPHandshake.version && c2 == Array(bytes[1..<RTMPHandshake.s0s1Size]), "C2 is not S1")
        guard bytes.count >= RTMPHandshake.responseSize else { return }
        _ = handshake.echoes(s2: bytes[RTMPHandshake.s0s1Size..<RTMPHandshake.responseSize])
        commands(Array(bytes[RTMPHandshake.responseSize...]))
    }

    /// The server's replies as the publisher reads them: chunks into messages, commands out of them; a command that
    /// parses is written back to a message that parses to itself, and its read-outs do not fail.
    static func commands(_ bytes: [UInt8]) {
        let messages: [RTMPMessage]
        switch decode([bytes[...]]) {
        case .messages(let m), .failed(let m, _): messages = m
        }
        for message in messages {
            switch message.type {
            case .userControl: _ = try? ProtocolControl.parseUserControl(message.payload)
            case .acknowledgement, .windowAcknowledgementSize, .setPeerBandwidth: _ = try? ProtocolControl.parseUInt32(message)
            default: break
            }
            _ = RTMPCommand.values(in: message)
            guard let command = try? RTMPCommand(message: message) else { continue }
            _ = (command.info, command.resultNumber, command.statusText)
            let again = command.message(streamID: message.streamID)
            guard let back = try? RTMPCommand(message: again) else {
                fatalError("fuzz invariant broken: the command \(command.name) written back does not parse")
            }
            check(back.name == command.name && AMF0.encode([back.object] + back.arguments) == AMF0.encode([command.object] + command.arguments), "the command \(command.name) changed when written back")
        }
    }

    /// A URL that parses rebuilds from its parts (tcUrl and key) to itself, and its printed forms hide the key.
    static func rtmpURL(_ bytes: [UInt8]) {
        guard let text = String(validating: bytes, as: UTF8.self), let url = try? RTMPURL(text) else { return }
        check(!url.host.isEmpty && (1...65535).contains(url.port), "host '\(url.host)' port \(url.port)")
        let rebuilt = url.tcUrl + "/" + url.streamKey
        guard let again = try? RTMPURL(rebuilt) else {
            fatalError("fuzz invariant broken: '\(rebuilt)', rebuilt from a parsed URL, does not parse")
        }
        check(again == url, "'\(rebuilt)' parses to \(again), not \(url)")
        if url.streamKey.count >= 4, !"<key>".contains(url.streamKey), !url.tcUrl.contains(url.streamKey) {
            check(!url.description.contains(url.streamKey), "the description shows the key")
        }
    }

    // MARK: Graph files and the decoder

    /// A graph file that builds has as many units as node ids, all distinct; building the same text again gives the
    /// same answer. Inputs with `/` or `\` are skipped: no path can then leave an empty folder of the fuzzer's own
    /// (a node reading `/dev/stdin` or a FIFO would block, not fail).
    static func graphFile(_ bytes: [UInt8]) {
        guard !bytes.contains(UInt8(ascii: "/")), !bytes.contains(UInt8(ascii: "\\")),
            let text = String(validating: bytes, as: UTF8.self)
        else { return }
        let base = "\(scratch)/graphFile"
        let first = Result { () throws(AudioError) in try GraphFile.load(json: text, baseDirectory: base, maximumFrames: 256) }
        let second = Result { () throws(AudioError) in try GraphFile.load(json: text, baseDirectory: base, maximumFrames: 256) }
        switch (first, second) {
        case (.success(let a), .success(let b)):
            check(a.nodeIDs == b.nodeIDs, "two builds of one file differ")
            check(Set(a.nodeIDs).count == a.nodeIDs.count && a.units.count == a.nodeIDs.count, "\(a.nodeIDs.count) ids, \(a.units.count) units")
        case (.failure(let a), .failure(let b)):
            check(a.code == b.code, "two builds of one file fail differently: \(a) / \(b)")
        default:
            fatalError("fuzz invariant broken: a graph file builds once and not twice")
        }
    }

    /// Any bytes as an UltraStar chart and as LRC lyrics: a chart that parses parses the same again; its times are
    /// finite, each syllable ends no sooner than it starts, a voice's notes follow each other without overlapping,
    /// a line spans its syllables, and LRC lines come in order of time.
    static func chart(_ bytes: [UInt8]) {
        for lrc in [false, true] {
            let parse = { () throws(AudioError) -> SongChart in
                lrc ? try SongChart.lrc(bytes: bytes, name: "fuzz.lrc") : try SongChart.ultraStar(bytes: bytes, name: "fuzz.txt")
            }
            let first = Result(catching: parse)
            let second = Result(catching: parse)
            switch (first, second) {
            case (.success(let a), .success(let b)):
                check(a == b, "two parses of one chart differ")
                check(a.warnings.count <= 100, "\(a.warnings.count) warnings")
                // Scored, with a singer who sings 262 Hz every 10 ms over the first minute: no trap, the totals in range.
                if a.hasNotes, let number = a.voices.first?.number, var score = try? SingingScore(chart: a, voice: number) {
                    var t = -1.0
                    while t < 60 {
                        score.add(PitchEstimate(time: t, frequency: 262, confidence: 1, voiced: true))
                        t += 0.01
                    }
                    let result = score.finish()
                    check((0...10_000).contains(result.total) && result.beatsHit <= result.beatsJudged, "score \(result.total)")
                }
                for voice in a.voices {
                    var previous: SongChart.Note?
                    var lastStart = -Double.infinity
                    for line in voice.lines {
                        check(!line.syllables.isEmpty, "an empty line")
                        check(line.start.isFinite && line.end.isFinite && line.start <= line.end, "line \(line.start) … \(line.end)")
                        check(line.start <= line.syllables.first!.start && line.end >= line.syllables.last!.start, "a line does not span its syllables")
                        if lrc { check(line.start >= lastStart, "LRC lines out of order") }
                        lastStart = line.start
                        for syllable in line.syllables {
                            check(syllable.start.isFinite && syllable.end.isFinite && syllable.start <= syllable.end,
                                  "syllable \(syllable.start) … \(syllable.end)")
                            check((syllable.note == nil) == lrc, "a note in LRC or a syllable without one in a chart")
                            if let note = syllable.note {
                                check(note.beats >= 0, "a note of \(note.beats) beats")
                                if let p = previous { check(note.startBeat >= p.startBeat + p.beats, "overlapping notes") }
                                previous = note
                            }
                        }
                    }
                }
            case (.failure(let a), .failure(let b)):
                check(a == b, "two parses of one chart fail differently: \(a) / \(b)")
                check(a.code == .invalidChart, "a chart's error with code \(a.code)")
            default:
                fatalError("fuzz invariant broken: a chart parses once and not twice")
            }
        }
    }

    /// Any bytes as a page's control message to the stage, for a karaoke session and a stream: parsed the same
    /// twice; a control taken has its values in the ranges the session accepts and an id of at most 64 characters;
    /// anything over 4096 bytes is refused; a refusal's reply is a JSON object saying `ok: false` with a short
    /// reason.
    static func stageControl(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        for kind in [StageMessages.Kind.karaoke, .stream] {
            let first = Result { () throws(StageMessages.Refusal) in try StageMessages.control(text, kind: kind) }
            let second = Result { () throws(StageMessages.Refusal) in try StageMessages.control(text, kind: kind) }
            switch (first, second) {
            case (.success(let a), .success(let b)):
                check(a == b, "two parses of one control differ")
                check(text.utf8.count <= StageMessages.maximumControlBytes, "a control of \(text.utf8.count) bytes taken")
                check((a.id?.count ?? 0) <= 64, "an id of \(a.id?.count ?? 0) characters")
                func volume(_ dB: Double) -> Bool { dB == -.infinity || (dB.isFinite && dB >= -96 && dB <= 12) }
                switch a.control {
                case .karaoke(let c):
                    check(kind == .karaoke, "a karaoke control for a stream")
                    switch c {
                    case .setVolume(_, let dB): check(volume(dB), "volume \(dB)")
                    case .setKey(let cents): check(cents.isFinite && abs(cents) <= 2400, "key \(cents)")
                    case .stepKey(let s): check(s.isFinite && abs(s) <= 24, "key step \(s)")
                    case .seek(let seconds): check(seconds.isFinite && seconds >= 0, "seek \(seconds)")
                    default: break
                    }
                case .stream(let c):
                    check(kind == .stream, "a stream control for karaoke")
                    if case .setVolume(let dB) = c { check(volume(dB), "volume \(dB)") }
                }
            case (.failure(let a), .failure(let b)):
                check(a == b, "two refusals of one message differ")
                check(!a.message.isEmpty && a.message.count <= 200, "a refusal of \(a.message.count) characters")
                let reply = StageMessages.reply(id: a.id, error: a.message)
                let object = try? JSONSerialization.jsonObject(with: Data(reply.utf8)) as? [String: Any]
                check(object?["ok"] as? Bool == false && object?["error"] as? String == a.message, "a reply that is not JSON: \(reply)")
            default:
                fatalError("fuzz invariant broken: a control parses once and not twice")
            }
        }
    }

    /// Any bytes as a phone's or the host's evening request: parsed the same twice; a request taken is within its
    /// limits (the message at most 4096 bytes, texts at most 1024, a phone's secret 16 … 64 of its characters, a key
    /// −12 … 12, a part 1 … 9, ids 1 or more, the cap 1 … 50); a refusal is a short reason in a reply that is JSON.
    static func eveningRequest(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let first = Result { () throws(StageMessages.Refusal) in try StageMessages.evening(text) }
        let second = Result { () throws(StageMessages.Refusal) in try StageMessages.evening(text) }
        switch (first, second) {
        case (.success(let a), .success(let b)):
            check(a.id == b.id && a.request == b.request, "two parses of one request differ")
            check(text.utf8.count <= StageMessages.maximumControlBytes, "a request of \(text.utf8.count) bytes taken")
            check((a.id?.count ?? 0) <= 64, "an id of \(a.id?.count ?? 0) characters")
            func short(_ s: String?) -> Bool { (s?.utf8.count ?? 0) <= StageMessages.maximumTextBytes }
            switch a.request {
            case .join(let name, let phone):
                check(short(name) && (16...64).contains(phone.utf8.count), "join \(name.utf8.count)/\(phone.utf8.count) bytes")
                check(phone.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }, "a phone secret with \(phone)")
            case .search(let words): check(short(words), "a search of \(words.utf8.count) bytes")
            case .queue(let song, let part, let partner, let key, _, let singer):
                check(song >= 1 && (part.map { (1...9).contains($0) } ?? true) && (key.map { (-12...12).contains($0) } ?? true), "queue \(song) \(String(describing: part)) \(String(describing: key))")
                check(short(partner) && short(singer), "a name too long")
            case .dequeue(let entry): check(entry >= 1, "dequeue \(entry)")
            case .move(let entry, let position): check(entry >= 1 && position >= 1, "move \(entry) to \(position)")
            case .pauseQueue: break
            case .cap(let songs): check((1...50).contains(songs), "cap \(songs)")
            }
        case (.failure(let a), .failure(let b)):
            check(a == b, "two refusals of one request differ")
            check(!a.message.isEmpty && a.message.count <= 200, "a refusal of \(a.message.count) characters")
            let reply = StageMessages.reply(id: a.id, answer: EveningAnswer(error: a.message))
            let object = try? JSONSerialization.jsonObject(with: Data(reply.utf8)) as? [String: Any]
            check(object?["ok"] as? Bool == false && object?["error"] as? String == a.message, "a reply that is not JSON: \(reply)")
        default:
            fatalError("fuzz invariant broken: a request parses once and not twice")
        }
    }

    /// Any bytes as a phone's audio message: read the same twice; a message taken has its fields within their
    /// limits, its payload the length its codec and frames say, writes back to the same bytes, and its PCM reads as
    /// frames × channels samples in −1 … 1; an Opus payload decodes (mono) to at most 120 ms of finite samples, or is
    /// refused. A refusal says what was wrong.
    static func phoneAudio(_ bytes: [UInt8]) {
        let first = Result { () throws(AudioError) in try PhoneAudioPacket(decoding: bytes) }
        let second = Result { () throws(AudioError) in try PhoneAudioPacket(decoding: bytes) }
        switch (first, second) {
        case (.success(let a), .success(let b)):
            check(a == b, "two reads of one message differ")
            check(a.encoded() == bytes, "a message written back differs")
            check(bytes.count <= PhoneAudioPacket.maximumBytes, "a message of \(bytes.count) bytes taken")
            check(PhoneAudioPacket.sampleRates.contains(a.sampleRate) && (1...2).contains(a.channelCount), "\(a.sampleRate) Hz, \(a.channelCount) channels")
            check((1...PhoneAudioPacket.maximumFrames).contains(a.frameCount), "\(a.frameCount) frames")
            switch a.codec {
            case .pcm16:
                let samples = a.pcmSamples()
                check(samples.count == a.frameCount * a.channelCount, "\(samples.count) PCM samples for \(a.frameCount) frames")
                check(samples.allSatisfy { $0 >= -1 && $0 < 1 }, "a PCM sample out of range")
            case .opus:
                check(a.sampleRate == 48_000 && (1...PhoneAudioPacket.maximumOpusBytes).contains(a.payload.count), "an Opus packet of \(a.payload.count) bytes at \(a.sampleRate) Hz")
                // FFmpeg's decoder, as the room uses it (one per input: inputs may run side by side in the tests).
                if let opus = try? OpusPacketDecoder(channelCount: a.channelCount), let decoded = try? opus.decode(a.payload) {
                    check(decoded.count <= 5760 && decoded.allSatisfy(\.isFinite), "an Opus packet decoded to \(decoded.count) samples")
                }
            }
        case (.failure(let a), .failure(let b)):
            check(a == b && a.code == .invalidFormat && !a.message.isEmpty && a.message.count <= 200, "a refusal: \(a)")
        default:
            fatalError("fuzz invariant broken: a message reads once and not twice")
        }
    }

    /// Frames decoded at most per input: a tiny packet may decode to a lot, and deeper frames of one stream reach no
    /// new code (4 s of audio per input ran 170 inputs a second).
    static let decodeLimit = 16_384

    /// Any bytes through FFmpeg's demuxers and decoders as `probe`, `play` and `encode` see a file: a file that
    /// opens has a rate and channels in range, reads no more frames than an exact count, finite samples, and reads
    /// the same samples again after a seek to the start. Inputs naming other files or URLs (playlists) are skipped:
    /// the fuzzer reads no network and no other file.
    static func decoder(_ bytes: [UInt8]) {
        for marker in ["://", "#EXT", "ffconcat", "file:", "concat:"] where bytes.firstRange(of: Array(marker.utf8)) != nil { return }
        let path = write(bytes, to: "decoder/input")
        if let probe = try? AudioFileProbe.probe(path: path) {
            check(probe.description.sampleRate > 0 && probe.description.channelCount > 0, "probe \(probe.description)")
            check(!probe.duration.isNaN, "probe duration NaN")
        }
        guard let decoder = try? AudioFileDecoder(path: path) else { return }
        check(decoder.sampleRate >= 1000 && decoder.sampleRate <= 768_000, "rate \(decoder.sampleRate)")
        check((1...64).contains(decoder.channelCount), "\(decoder.channelCount) channels")
        guard let first = try? readAll(channels: decoder.channelCount, limit: decodeLimit, { v throws(AudioError) in try decoder.read(into: v) }) else { return }
        if decoder.isFrameCountExact, first[0].count < decodeLimit {
            check(Int64(first[0].count) <= decoder.frameCount, "read \(first[0].count) of exactly \(decoder.frameCount) frames")
        }
        for channel in first { for s in channel { check(s.isFinite, "a decoded sample is \(s)") } }
        guard (try? decoder.seek(toFrame: 0)) != nil,
            let again = try? readAll(channels: decoder.channelCount, limit: min(first[0].count, 4096), { v throws(AudioError) in try decoder.read(into: v) })
        else { return }
        let n = again[0].count
        check(sameSamples(first.map { Array($0.prefix(n)) }, again), "a seek to the start reads other samples")
    }
}
