//go:build !failpoints

package failpoint

// Enabled says whether this build has failpoints.
const Enabled = false

// Hit does nothing in a build without failpoints.
func Hit(Point) {}
