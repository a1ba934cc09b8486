import AudioCore
import CFFmpeg
import MediaContainers

/// What `liveaudio probe` reports about a file: its codec and format, and its packets counted one by one.
public struct AudioFileProbe: Hashable, Sendable {
    /// The file's container, codec, profile, sample rate, channel count, bit rate and duration.
    public var description: AudioFileDescription
    /// Packets of the audio stream, counted one by one as the demuxer reads them.
    public var packetCount: Int
    /// The first packet's presentation time, in seconds (negative when the container signals priming that way).
    public var firstTimestamp: Double
    /// The last packet's presentation time, in seconds.
    public var lastTimestamp: Double
    /// Seconds of audio after trimming, as the container states it (or, when it does not, as the packets add up).
    public var duration: Double
    /// Samples of encoder delay the container signals (an MP4 edit list, an MP3 LAME header); nil when the
    /// container has no way to say (ADTS, FLV, WAV).
    public var priming: Int?

    /// Counts the packets of `path`'s audio stream. FLV and ADTS files are also checked tag by tag and frame by
    /// frame by LiveAudio's own parsers, which are stricter than FFmpeg's.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO`, `.unsupportedFile`, `.corruptFile` with what is wrong and
    ///   where.
    public static func probe(path: String) throws(AudioError) -> AudioFileProbe {
        try AudioFile.validate(path: path)
        try FFmpegLibraries.load()
        var format: UnsafeMutablePointer<AVFormatContext>?
        var r = ff.avformat_open_input(&format, path, nil, nil)
        guard r >= 0, let context = format else {
            throw AudioError(.unsupportedFile, "'\(path)' is not an audio file FFmpeg can read: \(ffmpegMessage(r))")
        }
        defer { ff.avformat_close_input(&format) }
        r = ff.avformat_find_stream_info(context, nil)
        guard r >= 0 else { throw AudioError(.corruptFile, "'\(path)': cannot read the streams: \(ffmpegMessage(r))") }
        let index = ff.av_find_best_stream(context, AVMEDIA_TYPE_AUDIO, -1, -1, nil, 0)
        guard index >= 0, let stream = context.pointee.streams[Int(index)], let parameters = stream.pointee.codecpar else {
            throw AudioError(.unsupportedFile, "'\(path)' has no audio stream")
        }
        let tb = stream.pointee.time_base
        guard tb.num > 0, tb.den > 0 else {
            throw AudioError(.corruptFile, "'\(path)': the audio stream's time base \(tb.num)/\(tb.den) is not valid")
        }
        func seconds(_ t: Int64) -> Double { Double(t) * Double(tb.num) / Double(tb.den) }
        func outOfRange(_ what: String) -> AudioError {
            AudioError(.corruptFile, "'\(path)': \(what) is out of range: the file is damaged")
        }
        let rate = Double(parameters.pointee.sample_rate)
        var packet = ff.av_packet_alloc()
        defer { ff.av_packet_free(&packet) }
        guard let packet else { throw AudioError(.resourceUnavailable, "cannot allocate a packet") }
        var count = 0
        var first: Int64?
        var last: Int64 = 0
        var end: Int64 = 0
        var skipped: Int?
        while true {
            r = ff.av_read_frame(context, packet)
            if r == la_averror_eof() { break }
            guard r >= 0 else {
                throw AudioError(.corruptFile, "'\(path)' is damaged after packet \(count): \(ffmpegMessage(r))")
            }
            defer { ff.av_packet_unref(packet) }
            guard packet.pointee.stream_index == index else { continue }
            count += 1
            // A packet may carry no time at all (AV_NOPTS_VALUE in both fields): it counts, but says nothing of when.
            let pts = packet.pointee.pts != Int64.min ? packet.pointee.pts : packet.pointee.dts
            guard pts != Int64.min else { continue }
            if first == nil {
                first = pts
                var size = 0
                if let side = ff.av_packet_get_side_data(packet, AV_PKT_DATA_SKIP_SAMPLES, &size), size >= 4 {
                    skipped = Int(side[0]) | Int(side[1]) << 8 | Int(side[2]) << 16 | Int(side[3]) << 24
                }
            }
            last = pts
            let (packetEnd, overflow) = pts.addingReportingOverflow(max(0, packet.pointee.duration))
            guard !overflow else { throw outOfRange("packet \(count)'s time") }
            end = max(end, packetEnd)
        }
        guard count > 0 else { throw AudioError(.corruptFile, "'\(path)' holds no audio packets") }
        guard let first else { throw AudioError(.corruptFile, "'\(path)': none of its audio packets has a time") }
        var priming = skipped.flatMap { $0 > 0 ? $0 : nil }
        if priming == nil, parameters.pointee.initial_padding > 0 { priming = Int(parameters.pointee.initial_padding) }
        if priming == nil, first < 0 {
            let frames = -seconds(first) * rate
            priming = frames.isFinite && abs(frames) < 1e15 ? Int(frames.rounded()) : nil
            guard priming != nil else { throw outOfRange("the first packet's time") }
        }
        let container = String(cString: context.pointee.iformat.pointee.name)
        // The container's word where it is exact (an MP4 edit list, FLAC's sample count, an FLV's onMetaData);
        // otherwise what the packets add up to (an ADTS file states nothing; FFmpeg's figure is a bit-rate guess).
        let (span, overflow) = end.subtractingReportingOverflow(max(first, 0))
        guard !overflow else { throw outOfRange("the packets' times") }
        var duration = seconds(span)
        if DecodeSession.exactContainers.contains(container), stream.pointee.duration != Int64.min,
            stream.pointee.duration > 0
        {
            duration = seconds(stream.pointee.duration)
        } else if container == "flv", context.pointee.duration > 0 {
            duration = Double(context.pointee.duration) / Double(AV_TIME_BASE)
        }
        let codec = ff.avcodec_get_name(parameters.pointee.codec_id).map { String(cString: $0) } ?? "unknown"
        let profile = ff.avcodec_profile_name(parameters.pointee.codec_id, parameters.pointee.profile).map { String(cString: $0) }
        return AudioFileProbe(
            description: AudioFileDescription(
                container: container, codec: codec, profile: profile, sampleRate: rate,
                channelCount: Int(parameters.pointee.ch_layout.nb_channels),
                bitRate: Int(parameters.pointee.bit_rate > 0 ? parameters.pointee.bit_rate : context.pointee.bit_rate),
                duration: duration),
            packetCount: count, firstTimestamp: seconds(first), lastTimestamp: seconds(last), duration: duration,
            priming: priming)
    }
}

extension AudioFile {
    /// Checks the containers LiveAudio parses itself — WAV, FLV, ADTS — with its own strict parsers, so a damaged
    /// file is reported as damaged instead of being decoded in part. Other files pass through to FFmpeg.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` (missing, unreadable, a directory), `.corruptFile` (empty or
    ///   damaged).
    public static func validate(path: String) throws(AudioError) {
        let head = try AudioFileHead.read(path: path)
        if head.starts(with: Array("RIFF".utf8)) || head.starts(with: Array("RF64".utf8)) {
            do throws(AudioError) {
                _ = try WAVFileReader(path: path)
            } catch where error.code == .unsupportedFile {
                // A WAV encoding LiveAudio does not read itself (ADPCM, 8-bit): FFmpeg's turn.
            }
        } else if head.starts(with: Array("FLV".utf8)) {
            let contents: FLVContents.Summary
            do throws(AudioError) {
                contents = try FLVContents.check(path: path)
            } catch {
                throw AudioError(error.code, "'\(path)': \(error.message)")
            }
            guard contents.audioTagCount > 0 else {
                throw AudioError(.corruptFile, "'\(path)': the FLV file has no audio tags")
            }
        } else if head.count >= 2, head[0] == 0xFF, head[1] & 0xF6 == 0xF0 {
            _ = try ADTSStream.check(path: path)
        }
    }
}
