package sandbox

// Template decides what is installed and how big a sandbox is.
type Template struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Image       string   `json:"image"`
	VCPU        float64  `json:"vcpu"`
	MemoryMB    int64    `json:"memoryMb"`
	HomeDiskMB  int64    `json:"homeDiskMb"`
	TmpDiskMB   int64    `json:"tmpDiskMb"`
	Languages   []string `json:"languages"`
}

// Image names that make setup builds locally (no registry is reachable).
const (
	ImageBase   = "rarecloud/sandbox-base:latest"
	ImagePython = "rarecloud/sandbox-python:latest"
	ImageNode   = "rarecloud/sandbox-node:latest"
)

// DefaultTemplates are the product's templates: base has neither python nor
// node, python carries pip, pandas and numpy, node carries npm. Every one
// gets the documented 2 GB home and 1 GB /tmp.
func DefaultTemplates() []Template {
	return []Template{
		{
			Name:        "base",
			Description: "Minimal Debian 12 with a POSIX shell and coreutils; neither python nor node.",
			Image:       ImageBase,
			VCPU:        1,
			MemoryMB:    1024,
			HomeDiskMB:  2048,
			TmpDiskMB:   1024,
			Languages:   []string{},
		},
		{
			Name:        "python",
			Description: "Debian 12 with Python 3 (python, python3), pip, pandas and numpy.",
			Image:       ImagePython,
			VCPU:        2,
			MemoryMB:    2048,
			HomeDiskMB:  2048,
			TmpDiskMB:   1024,
			Languages:   []string{"python"},
		},
		{
			Name:        "node",
			Description: "Debian 12 with Node.js and npm.",
			Image:       ImageNode,
			VCPU:        2,
			MemoryMB:    2048,
			HomeDiskMB:  2048,
			TmpDiskMB:   1024,
			Languages:   []string{"node"},
		},
	}
}

func (t Template) hasLanguage(lang string) bool {
	for _, l := range t.Languages {
		if l == lang {
			return true
		}
	}
	return false
}
