/**
 * The names of the mechanisms loaded on demand (`optional.ts`) that the core knows without loading them, for
 * validation, the policy and `needsOf`: the memoized ones with their kind, the distribution ones with the parameters
 * a spec may give them. The modules they name read them too, so they sit below those modules (and below the loader).
 */

/** The memoized (longitudinal) mechanisms a spec with a privacy block may name, by the kind of attribute they take. */
export const LONGITUDINAL_KIND: Record<string, "frequency" | "numeric"> = {
  "l-grr": "frequency", "l-oue": "frequency", "l-osue": "frequency", "l-sue": "frequency", rappor: "frequency",
  "1bitmean": "numeric", dbitflip: "frequency",
};

/** The distribution mechanisms a numeric attribute may name, and the parameters a spec may give them
 * (`registry.DISTRIBUTION`, their classes' `parameter_names()`; smoothing is the collector's only). */
export const DISTRIBUTION_PARAMETERS: Record<string, readonly string[]> = { hh: ["bins", "fanout"], sw: ["bins", "smoothing"] };
