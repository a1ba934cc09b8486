// live-stream: the microphone (or a file) through a graph file's voice chain, encoded to AAC-LC once and sent to
// every destination at the same time — here a file and an RTMP server.
//
//   swift run live-stream show.m4a rtmp://127.0.0.1/live/key [--input FILE] [--seconds N]
//
// Destinations: rtmp:// or rtmps:// URLs and .m4a, .flv or .aac files, as many as you like. Without --input the
// default ALSA capture device is the input. Ctrl-C is not handled here: give --seconds (default 30).
import Foundation
import LiveAudio

var destinations: [String] = []
var inputFile: String?
var seconds = 30.0
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--input": inputFile = arguments.popFirst()
    case "--seconds": seconds = arguments.popFirst().flatMap(Double.init) ?? seconds
    default: destinations.append(argument)
    }
}

do {
    let input: LiveStreamSession.Input =
        inputFile.map { .file(path: $0, realTime: true) } ?? .device(name: nil, backend: .alsa)
    var configuration = LiveStreamSession.Configuration(input: input)
    // Output(parsing:) tells a URL from a file name; its errors never repeat a stream key.
    configuration.outputs = try destinations.map { (text: String) throws(AudioError) in
        try LiveStreamSession.Output(parsing: text)
    }
    configuration.bitRate = 128_000
    let chain = "graphs/voice-chain.json"
    if FileManager.default.fileExists(atPath: chain) { configuration.graphPath = chain }

    // Everything is checked here — the graph, the input, each destination, the encoder's settings — so a mistake
    // is an error now, before anything is opened.
    let session = try LiveStreamSession(configuration)
    try await session.start()          // files open, every server accepts, then the input starts
    print("streaming to \(configuration.outputs.map(\.description).joined(separator: ", "))")

    var elapsed = 0.0
    while elapsed < seconds && !session.hasEnded && session.failure == nil {
        try await Task.sleep(for: .seconds(1))
        elapsed += 1
        // Meters and statistics: read from any thread but the render thread; a VU display polls them like this.
        let peak = session.meters.input.peakDecibels
        print(String(format: "%4.0f s  input peak %6.1f dBFS  ", elapsed, peak) + session.statistics.loudness.statusText)
        if elapsed == 5 { session.volume = 0.8 }   // 0 … 4, ramped over one block: no click
    }
    let summary = await session.stop()  // encodes what is buffered, finishes the files, unpublishes
    print(summary.statistics)
    if let error = summary.error { print("live-stream: \(error)"); exit(1) }
} catch {
    print("live-stream: \(error)")
    exit(1)
}
