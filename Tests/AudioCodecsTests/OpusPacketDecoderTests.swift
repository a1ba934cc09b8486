import AudioCodecs
import Foundation
import LiveAudio
import Testing
import TestSupport

/// The packets of an Ogg Opus file (RFC 7845): each page's segments joined into packets, the first two (OpusHead,
/// OpusTags) apart; the pre-skip from OpusHead.
func oggOpusPackets(_ path: String) throws -> (preSkip: Int, channels: Int, packets: [[UInt8]]) {
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    var packets: [[UInt8]] = []
    var current: [UInt8] = []
    var at = 0
    while at + 27 <= bytes.count, bytes[at..<at + 4].elementsEqual(Array("OggS".utf8)) {
        let segments = Int(bytes[at + 26])
        let table = bytes[(at + 27)..<(at + 27 + segments)]
        var body = at + 27 + segments
        for lace in table {
            current += bytes[body..<body + Int(lace)]
            body += Int(lace)
            if lace < 255 {
                packets.append(current)
                current = []
            }
        }
        at = body
    }
    let head = try #require(packets.first, "no packets in \(path)")
    #expect(head.starts(with: Array("OpusHead".utf8)))
    return (Int(head[10]) | Int(head[11]) << 8, Int(head[9]), Array(packets.dropFirst(2)))
}

@Suite struct OpusPacketDecoderTests {
    /// FFmpeg's libopus encodes a signal at 64 kbit/s in 20 ms packets, mono and stereo; each packet through
    /// ``OpusPacketDecoder`` gives what FFmpeg's own command line decodes the file to (the same decoder: within
    /// float rounding), once the pre-skip its decoder drops is dropped — and 960 frames a packet.
    @Test(arguments: [1, 2])
    func packetsDecodeToWhatFFmpegDecodesTheFileTo(channels: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: 2, sampleRate: 48_000)
        try writeWAV(dir.file("in.wav"), channels: Array(signal.prefix(channels)), sampleRate: 48_000)
        try FFmpeg.run(["-i", dir.file("in.wav"), "-c:a", "libopus", "-b:a", "64k", "-frame_duration", "20", dir.file("out.opus")])
        let (preSkip, fileChannels, packets) = try oggOpusPackets(dir.file("out.opus"))
        #expect(fileChannels == channels && packets.count >= 100)
        let decoder = try OpusPacketDecoder(channelCount: channels, preSkip: preSkip)
        var ours: [Float] = []
        for p in packets {
            let samples = try decoder.decode(p)
            #expect(samples.count == 960)
            ours += samples
        }
        let reference = try FFmpeg.decode(dir.file("out.opus"), channels: channels)
        let mono = (0..<reference[0].count).map { i in reference.reduce(0) { $0 + $1[i] } / Float(channels) }
        let n = min(mono.count, ours.count - preSkip)
        #expect(n > 90_000)
        let difference = maxAbsDifference(Array(ours[preSkip..<preSkip + n]), Array(mono.prefix(n)))
        #expect(difference < 1e-4, "the packets decode \(difference) away from FFmpeg's decoding of the file")
    }

    /// Damaged packets and wrong setups are refused with an error, never a crash.
    @Test func badPacketsAreRefused() throws {
        #expect(throws: AudioError.self) { try OpusPacketDecoder(channelCount: 3) }
        #expect(throws: AudioError.self) { try OpusPacketDecoder(channelCount: 1, preSkip: -1) }
        let decoder = try OpusPacketDecoder(channelCount: 1)
        #expect(throws: AudioError.self) { try decoder.decode([]) }
        // A TOC byte claiming code 3 (several frames) with a frame count of 0.
        #expect(throws: AudioError.self) { try decoder.decode([0x03, 0x00]) }
    }
}
