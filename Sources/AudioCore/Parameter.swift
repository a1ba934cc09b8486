import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a parameter's number means; shown in messages and documentation.
public enum ParameterUnit: String, Sendable, CaseIterable {
    /// Decibels, shown as `-6 dB`.
    case decibels = "dB"
    /// A linear gain factor (1 is unity), shown as a bare number.
    case linearGain = "linear gain"
    /// Frequency in hertz, shown as `440 Hz`.
    case hertz = "Hz"
    /// Hundredths of a semitone (1200 to the octave).
    case cents = "cents"
    /// Time in seconds, shown as `2 s`.
    case seconds = "s"
    /// Time in milliseconds, shown as `250 ms`.
    case milliseconds = "ms"
    /// Percent, e.g. a wet/dry mix of 0 … 100, shown as `50 %`.
    case percent = "%"
    /// Stereo position from −1 (left) through 0 (center) to 1 (right), shown as a bare number.
    case pan = "pan"
    /// A switch: 0 is off, any other value on; shown as `on` or `off`.
    case boolean = "on/off"
    /// A plain number with no unit (a ratio, a Q, a mode), shown as a bare number.
    case generic = ""

    func format(_ value: Float) -> String {
        let number = value == value.rounded() && abs(value) < 1e9 ? String(Int(value)) : String(value)
        switch self {
        case .generic, .pan, .linearGain: return number
        case .boolean: return value != 0 ? "on" : "off"
        default: return "\(number) \(rawValue)"
        }
    }
}

/// A parameter's declaration: identifier, range, unit, default, and how fast changes are smoothed.
public struct ParameterSpec: Sendable, Hashable {
    /// The key the parameter is set and looked up by, e.g. `"amplitude"` or `"pan.0"`.
    public let identifier: String
    /// A human-readable name for messages and user interfaces, e.g. `"Wet/dry mix"`.
    public let name: String
    /// The values ``Parameter/set(_:)`` accepts; ``defaultValue`` lies within it.
    public let range: ClosedRange<Float>
    /// What the number means; also how values are shown in messages.
    public let unit: ParameterUnit
    /// The value a new ``Parameter`` starts at.
    public let defaultValue: Float
    /// Seconds over which the render thread ramps to a new value; 0 applies it at the next cycle.
    public let smoothingTime: Double

    /// Declares a parameter.
    /// - Parameters:
    ///   - identifier: the key the parameter is set and looked up by.
    ///   - name: a human-readable name for messages and user interfaces.
    ///   - range: the values the parameter accepts.
    ///   - unit: what the number means.
    ///   - defaultValue: the starting value; must lie within `range`.
    ///   - smoothingTime: seconds over which the render thread ramps to a new value; 0.02 (20 ms) by default,
    ///     0 to apply a new value at the next cycle.
    public init(
        _ identifier: String, name: String, range: ClosedRange<Float>, unit: ParameterUnit, default defaultValue: Float,
        smoothingTime: Double = 0.02
    ) {
        precondition(range.contains(defaultValue), "default of \(identifier) outside its range")
        self.identifier = identifier
        self.name = name
        self.range = range
        self.unit = unit
        self.defaultValue = defaultValue
        self.smoothingTime = smoothingTime
    }

    /// `"−96 dB … 24 dB"`.
    public var rangeDescription: String { "\(unit.format(range.lowerBound)) … \(unit.format(range.upperBound))" }
}

/// A live parameter: any thread sets it, the render thread reads the target and ramps toward it.
///
/// Thread safety: ``set(_:)`` and ``value`` may be called from any thread; the value is one atomic word.
public final class Parameter: Sendable {
    /// The declaration: identifier, name, range, unit, default and smoothing time.
    public let spec: ParameterSpec
    /// The unit kind that owns the parameter, for error messages.
    public let owner: String
    private let bits: Atomic<UInt32>

    /// Creates a live parameter set to `spec`'s default value.
    /// - Parameters:
    ///   - spec: the parameter's declaration.
    ///   - owner: the unit kind that owns the parameter (e.g. `"tone"`), named in error messages.
    public init(_ spec: ParameterSpec, owner: String) {
        self.spec = spec
        self.owner = owner
        bits = Atomic(spec.defaultValue.bitPattern)
    }

    /// The spec's ``ParameterSpec/identifier``.
    public var identifier: String { spec.identifier }

    /// The most recently set value: the target the render thread ramps toward.
    @inline(__always)
    public var value: Float { Float(bitPattern: bits.load(ordering: .relaxed)) }

    /// Sets a new target value.
    /// - Throws: ``AudioError`` `.invalidParameter` naming the unit, the parameter and its range when `newValue` is
    ///   outside the range or not a number.
    public func set(_ newValue: Float) throws(AudioError) {
        guard !newValue.isNaN, spec.range.contains(newValue) else {
            throw AudioError(
                .invalidParameter,
                "\(owner): parameter '\(spec.identifier)' = \(spec.unit.format(newValue)) is out of range "
                    + "\(spec.rangeDescription)")
        }
        bits.store(newValue.bitPattern, ordering: .relaxed)
    }
}

/// A value that moves linearly to its target over a fixed number of samples: the render-thread side of a
/// parameter. Changes take effect at the next ``setTarget(_:)``, so output does not depend on the block size
/// as long as targets change only between blocks.
public struct SmoothedValue: Sendable {
    /// The value reached so far: where the ramp stands now (the target when no ramp is under way).
    public var value: Float { current }
    /// The value being ramped toward: the last one given to ``setTarget(_:)`` or ``reset(to:)``.
    public var targetValue: Float { target }
    @usableFromInline var current: Float
    @usableFromInline var target: Float
    @usableFromInline var step: Float = 0
    @usableFromInline var remaining = 0
    /// Samples a ramp takes.
    public var rampFrames: Int

    /// Creates a value resting at `value`, with no ramp under way.
    /// - Parameters:
    ///   - value: the start value, and the target.
    ///   - rampFrames: samples a ramp takes; 0 (or less) makes every new target apply at once.
    public init(_ value: Float, rampFrames: Int) {
        current = value
        target = value
        self.rampFrames = max(rampFrames, 0)
    }

    /// Starts a ramp toward `newTarget` if it differs from the current target.
    @inlinable
    public mutating func setTarget(_ newTarget: Float) {
        guard newTarget != target else { return }
        target = newTarget
        if rampFrames == 0 {
            current = newTarget
            remaining = 0
        } else {
            remaining = rampFrames
            step = (newTarget - current) / Float(rampFrames)
        }
    }

    /// Jumps to `value` with no ramp.
    public mutating func reset(to value: Float) {
        current = value
        target = value
        remaining = 0
    }

    /// True while the value is still moving toward ``targetValue``.
    public var isRamping: Bool { remaining > 0 }

    /// Moves `frames` samples along the ramp at once and returns the value reached: for units that update
    /// coefficients at control rate (every few dozen samples) rather than per sample.
    @inlinable
    public mutating func advance(by frames: Int) -> Float {
        if remaining > 0 {
            if frames >= remaining {
                remaining = 0
                current = target
            } else {
                remaining -= frames
                current += step * Float(frames)
            }
        }
        return current
    }

    /// The next sample's value.
    @inlinable
    public mutating func next() -> Float {
        if remaining > 0 {
            remaining -= 1
            current = remaining == 0 ? target : current + step
        }
        return current
    }
}

/// Decibels to linear gain; −∞ dB (and anything at or below −144 dB) is 0.
@inlinable
public func decibelsToGain(_ dB: Float) -> Float { dB <= -144 ? 0 : powf(10, dB / 20) }

/// Linear gain to decibels; 0 gives −∞.
@inlinable
public func gainToDecibels(_ gain: Float) -> Float { 20 * log10f(gain) }
