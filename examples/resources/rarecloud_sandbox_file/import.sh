# A file is imported by <sandbox_id>:<path>. A text file imports as
# content, any other file as content_base64.
terraform import rarecloud_sandbox_file.config sbx-0123abcd:/home/user/app/config.json
