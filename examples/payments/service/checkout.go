package service

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed web
var web embed.FS

// checkoutPage serves the checkout page (web/index.html) at /.
func checkoutPage() http.Handler {
	page, err := web.ReadFile("web/index.html")
	if err != nil {
		panic(err) // embedded at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	})
}

// webFiles serves the page's script and style under /web/.
func webFiles() http.Handler {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix("/web/", http.FileServerFS(sub))
}
