package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed ui
var uiFS embed.FS

// Assets returns the embedded files the dashboard serves (index.html,
// app.js, style.css, vendor/uplot/...), rooted at the ui directory.
func Assets() fs.FS {
	sub, err := fs.Sub(uiFS, "ui")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return sub
}
