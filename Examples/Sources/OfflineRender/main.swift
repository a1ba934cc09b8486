// offline-render: a graph built in code, rendered faster than real time into a WAV file — no sound card involved.
//
//   swift run offline-render [OUTPUT.wav] [SECONDS]      (defaults: offline-render.wav, 4 s)
//
// Two tones (an A and the E above it) go into a mixer, through a low-pass filter, a reverb and a limiter, to the
// graph's output. Every node is a unit from LiveAudio's library; `ear-monitor` shows a unit of your own.
import Foundation
import LiveAudio

let arguments = CommandLine.arguments.dropFirst()
let outputPath = arguments.first ?? "offline-render.wav"
let seconds = arguments.dropFirst().first.flatMap(Double.init) ?? 4

do {
    // The graph's format is always Float32, non-interleaved; only the rate and the channel count are yours to pick.
    let format = try StreamFormat.graph(sampleRate: 48_000, channelCount: 2)
    let graph = try RenderGraph(format: format, maximumFrames: 1024)

    let low = try graph.addNode(ToneUnit(format: format, frequency: 220, amplitude: 0.3), name: "A3")
    let fifth = try graph.addNode(ToneUnit(format: format, frequency: 330, amplitude: 0.2), name: "E4")
    let mixer = try graph.addNode(MixerUnit(format: format, inputs: 2), name: "mixer")
    let filter = try graph.addNode(LowPassUnit(format: format, cutoff: 2_000), name: "filter")
    let room = try graph.addNode(ReverbUnit(format: format), name: "room")
    let limiter = try graph.addNode(LimiterUnit(format: format), name: "limiter")

    try graph.connect(low, to: mixer, inputBus: 0)
    try graph.connect(fifth, to: mixer, inputBus: 1)
    try graph.connect(mixer, to: filter)
    try graph.connect(filter, to: room)
    try graph.connect(room, to: limiter)
    try graph.connect(limiter, to: graph.output)

    // Parameters by their identifiers (the same names graph files use); any thread, any time.
    try graph.unit(room).setParameter("wetDryMix", 30)
    try graph.unit(limiter).setParameter("ceiling", -1)

    try graph.initialize()
    let renderer = OfflineRenderer(graph: graph)

    // 16-bit PCM in the file; the writer converts from the graph's Float32 as it goes.
    let fileFormat = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true)
    let file = try WAVFileWriter(path: outputPath, format: fileFormat)
    var remaining = Int(seconds * format.sampleRate)
    while remaining > 0 {
        let frames = min(remaining, graph.maximumFrames)
        let block = try renderer.render(frames: frames)   // valid until the next render call
        try file.write(block)
        remaining -= frames
    }
    try file.finish()
    print("wrote \(outputPath): \(file.framesWritten) frames, \(seconds) s at \(Int(format.sampleRate)) Hz")
} catch {
    // Every LiveAudio error is an AudioError: a stable code and a message that says what to do next.
    print("offline-render: \(error)")
    exit(1)
}
