import FoundationEssentials

/// A graph built from a graph file: the graph, and its nodes by id.
public final class LoadedGraph: Sendable {
    /// The graph, uninitialized, with every node added and connected as the file says.
    public let graph: RenderGraph
    /// Node ids from the file, in file order.
    public let nodeIDs: [String]
    /// Each node's id in ``graph``, by the node's id in the file.
    public let nodes: [String: NodeID]
    /// Each node's unit, by the node's id in the file.
    public let units: [String: RenderUnit]

    /// The file's connections by node id (`to` may be `"output"`).
    let edges: [(from: String, to: String)]
    /// What the file connects to its output: a node's id and its output bus.
    let outputSource: (id: String, bus: Int)?

    init(
        graph: RenderGraph, nodeIDs: [String], nodes: [String: NodeID], units: [String: RenderUnit],
        edges: [(from: String, to: String)] = [], outputSource: (id: String, bus: Int)? = nil
    ) {
        self.graph = graph
        self.nodeIDs = nodeIDs
        self.nodes = nodes
        self.units = units
        self.edges = edges
        self.outputSource = outputSource
    }

    /// The node the file connects to its output, for a session that goes on from there (a voice chain's wet voice,
    /// a stream's chain before its volume).
    /// - Throws: ``/AudioCore/AudioError`` `.invalidGraphDescription` when nothing is connected to the output, or
    ///   another output bus than a node's first is.
    func lastNode(of source: String, carrying what: String) throws(AudioError) -> NodeID {
        guard let end = outputSource, let node = nodes[end.id] else {
            throw AudioError(.invalidGraphDescription, "'\(source)' connects nothing to its output: \(what) goes there")
        }
        guard end.bus == 0 else {
            throw AudioError(
                .invalidGraphDescription,
                "'\(source)' connects output bus \(end.bus) of '\(end.id)' to its output: \(what) is taken from a node's first output bus")
        }
        return node
    }

    /// Graph-output frames per frame of node `id`: the product of what the units between it and the output do to
    /// time (a converter's rate ratio, a time-pitch's rate at its current setting), the largest over every path;
    /// 1 for a node with no path to the output.
    public func outputFramesPerFrame(of id: String) -> Double {
        var best: Double?
        var visiting: Set<String> = []
        func walk(_ node: String, _ scale: Double) {
            guard visiting.insert(node).inserted else { return }
            defer { visiting.remove(node) }
            for edge in edges where edge.from == node {
                if edge.to == "output" {
                    best = max(best ?? 0, scale)
                } else if let unit = units[edge.to] {
                    walk(edge.to, scale * unit.outputFramesPerInputFrame)
                }
            }
        }
        walk(id, 1)
        return best ?? 1
    }

    /// The graph's microphone nodes (`input`), by node id.
    public var inputUnits: [(id: String, unit: InputUnit)] {
        nodeIDs.compactMap { id in (units[id] as? InputUnit).map { (id, $0) } }
    }

    /// Sources that end (files, non-looping players), by node id.
    public var finiteSources: [(id: String, source: FiniteSource)] {
        nodeIDs.compactMap { id in (units[id] as? FiniteSource).map { (id, $0) } }
    }
}

/// Graph files: JSON descriptions of a graph (see `docs/graph-files.md`).
///
/// ```json
/// {"sampleRate": 48000, "channels": 2,
///  "nodes": [{"id": "beep", "type": "tone", "frequency": 440}],
///  "connections": [{"from": "beep", "to": "output"}]}
/// ```
public enum GraphFile {
    /// Reads and builds the graph in `path`; relative paths inside resolve against the file's folder.
    /// - Throws: ``/AudioCore/AudioError`` naming the node and field at fault (`.invalidGraphDescription`, or the code
    ///   of the underlying file or graph error).
    public static func load(path: String, maximumFrames: Int = 4096, registry: UnitRegistry = .standard)
        throws(AudioError) -> LoadedGraph
    {
        try load(path: path, maximumFrames: maximumFrames, registry: registry, into: nil)
    }

    /// Reads the graph in `path` and builds it — into `existing` when given (its nodes named `prefix` + id, its
    /// connections to `output` left for the caller: what is connected there is in ``LoadedGraph/edges``), or as a
    /// graph of its own.
    static func load(
        path: String, maximumFrames: Int = 4096, registry: UnitRegistry = .standard, into existing: RenderGraph?, prefix: String = ""
    ) throws(AudioError) -> LoadedGraph {
        guard let data = FileManager.default.contents(atPath: path) else {
            let exists = FileManager.default.fileExists(atPath: path)
            throw AudioError(.fileIO, "cannot read graph file '\(path)'" + (exists ? "" : ": no such file"))
        }
        let base = FilePath.folder(of: path)
        return try build(
            JSONValue.parse(data, source: "graph file '\(path)'"), baseDirectory: base,
            maximumFrames: maximumFrames, registry: registry, into: existing, prefix: prefix)
    }

    /// Builds a graph from JSON text.
    public static func load(json: String, baseDirectory: String = ".", maximumFrames: Int = 4096, registry: UnitRegistry = .standard)
        throws(AudioError) -> LoadedGraph
    {
        try build(
            JSONValue.parse(Data(json.utf8), source: "graph description"), baseDirectory: baseDirectory,
            maximumFrames: maximumFrames, registry: registry)
    }

    static func build(
        _ root: JSONValue, baseDirectory: String, maximumFrames: Int, registry: UnitRegistry, into existing: RenderGraph? = nil,
        prefix: String = ""
    ) throws(AudioError) -> LoadedGraph {
        func fail(_ message: String) -> AudioError { AudioError(.invalidGraphDescription, message) }
        guard case .object(let top) = root else { throw fail("a graph file holds a JSON object, got \(root.kindName)") }
        for key in top.keys where !["sampleRate", "channels", "nodes", "connections"].contains(key) {
            throw fail("unknown top-level field '\(key)' (known: sampleRate, channels, nodes, connections)")
        }
        var rate = 48_000.0
        if let v = top["sampleRate"] {
            guard case .number(let d) = v, StreamFormat.supportedSampleRates.contains(d), d == d.rounded() else {
                throw fail("field 'sampleRate' must be a whole number of Hz between 1000 and 768000, got \(v)")
            }
            rate = d
        }
        var channels = 2
        if let v = top["channels"] {
            guard case .number(let d) = v, (1...64).contains(d), d == d.rounded() else {
                throw fail("field 'channels' must be a whole number between 1 and 64, got \(v)")
            }
            channels = Int(d)
        }
        let format = try StreamFormat.graph(sampleRate: rate, channelCount: channels)
        if let existing, existing.format != format {
            throw fail("the graph is \(formatHz(rate)), \(channels) channels; the one it joins runs at \(existing.format)")
        }
        let graph: RenderGraph
        if let existing { graph = existing } else { graph = try RenderGraph(format: format, maximumFrames: maximumFrames) }

        guard case .array(let nodeList)? = top["nodes"] else { throw fail("field 'nodes' must be an array of nodes") }
        struct Declared {
            let id: String
            let type: String
            let values: [String: JSONValue]
            let format: StreamFormat
        }
        var declared: [Declared] = []
        var seen = Set<String>()
        for (index, item) in nodeList.enumerated() {
            guard case .object(let values) = item else { throw fail("nodes[\(index)] must be an object") }
            guard case .string(let id)? = values["id"], !id.isEmpty else {
                throw fail("nodes[\(index)] needs an 'id' string")
            }
            guard id != "output" else { throw fail("node id 'output' is reserved for the graph's output") }
            guard seen.insert(id).inserted else { throw fail("node id '\(id)' is used twice") }
            guard case .string(let type)? = values["type"] else { throw fail("node '\(id)' needs a 'type' string") }
            // A node may run at a rate of its own; it then reaches other rates through a converter node.
            var nodeFormat = format
            if let v = values["sampleRate"] {
                guard case .number(let r) = v, r == r.rounded(), (1_000...768_000).contains(r) else {
                    throw fail("node '\(id)' (\(type)): field 'sampleRate' must be a whole number of Hz between 1000 and 768000, got \(v)")
                }
                nodeFormat = try StreamFormat.graph(sampleRate: r, channelCount: channels)
            }
            declared.append(Declared(id: id, type: type, values: values, format: nodeFormat))
        }

        struct Connection {
            let label: String
            let from: String
            let to: String
            let fromBus: Int
            let toBus: Int
        }
        let connectionList: [JSONValue]
        switch top["connections"] {
        case nil: connectionList = []
        case .array(let a)?: connectionList = a
        case let other?: throw fail("field 'connections' must be an array, got \(other.kindName)")
        }
        var connections: [Connection] = []
        for (index, item) in connectionList.enumerated() {
            let label = "connections[\(index)]"
            guard case .object(let c) = item else { throw fail("\(label) must be an object") }
            for key in c.keys where !["from", "to", "bus", "fromBus"].contains(key) {
                throw fail("\(label): unknown field '\(key)' (known: from, to, bus, fromBus)")
            }
            guard case .string(let from)? = c["from"] else { throw fail("\(label) needs a 'from' node id") }
            guard case .string(let to)? = c["to"] else { throw fail("\(label) needs a 'to' node id") }
            guard seen.contains(from) else { throw fail("\(label): 'from' names unknown node '\(from)'") }
            guard to == "output" || seen.contains(to) else { throw fail("\(label): 'to' names unknown node '\(to)'") }
            func bus(_ key: String) throws(AudioError) -> Int {
                guard let v = c[key] else { return 0 }
                guard case .number(let d) = v, d >= 0, d == d.rounded(), d < 1024 else {
                    throw fail("\(label): field '\(key)' must be a bus number (0, 1, …), got \(v)")
                }
                return Int(d)
            }
            connections.append(Connection(label: label, from: from, to: to, fromBus: try bus("fromBus"), toBus: try bus("bus")))
        }

        // Nodes are made in file order, except that a node whose input format defaults to what feeds it (a converter
        // without "inputRate") waits until that node is made.
        let feeder = Dictionary(
            connections.filter { $0.toBus == 0 && $0.to != "output" }.map { ($0.to, ($0.from, $0.fromBus)) }, uniquingKeysWith: { a, _ in a })
        func waitsForSource(_ d: Declared) -> Bool { d.type == "converter" && d.values["inputRate"] == nil && feeder[d.id] != nil }
        var nodes: [String: NodeID] = [:]
        var units: [String: RenderUnit] = [:]
        var pending = declared
        while !pending.isEmpty {
            // The first node that can be made now; when every node left waits (a loop of converters), the first.
            let next = pending.firstIndex { d in
                !waitsForSource(d) || feeder[d.id].map { units[$0.0] != nil } == true
            } ?? 0
            let d = pending.remove(at: next)
            let sourceFormat = feeder[d.id].flatMap { (id, bus) in units[id].flatMap { $0.outputFormats.indices.contains(bus) ? $0.outputFormats[bus] : nil } }
            var fields = NodeFields(
                id: d.id, type: d.type, values: d.values, format: d.format, baseDirectory: baseDirectory,
                hasOwnRate: d.values["sampleRate"] != nil, sourceFormat: sourceFormat)
            let unit = try registry.make(&fields)
            do throws(AudioError) {
                nodes[d.id] = try graph.addNode(unit, name: prefix + d.id)
            } catch {
                throw AudioError(error.code, "node '\(d.id)' (\(d.type)): \(error.message)")
            }
            units[d.id] = unit
        }
        let ids = declared.map(\.id)

        var edges: [(from: String, to: String)] = []
        for c in connections {
            // Joining another graph: what leads to the output is the caller's to connect.
            if existing != nil, c.to == "output" {
                edges.append((c.from, c.to))
                continue
            }
            let destination = c.to == "output" ? graph.output : nodes[c.to]!
            do throws(AudioError) {
                try graph.connect(nodes[c.from]!, outputBus: c.fromBus, to: destination, inputBus: c.toBus)
            } catch {
                throw AudioError(error.code, "\(c.label) ('\(c.from)' → '\(c.to)'): \(error.message)")
            }
            edges.append((c.from, c.to))
        }
        let end = connections.first { $0.to == "output" }.map { (id: $0.from, bus: $0.fromBus) }
        return LoadedGraph(graph: graph, nodeIDs: ids, nodes: nodes, units: units, edges: edges, outputSource: end)
    }
}
