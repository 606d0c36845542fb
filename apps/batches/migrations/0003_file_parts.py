"""File bytes move from ``BatchFile.content`` to ``BatchFilePart`` rows (1 MiB each)."""

from django.db import migrations, models

PART_BYTES = 1024 * 1024


def split(apps, schema_editor):
    BatchFile = apps.get_model("batches", "BatchFile")
    BatchFilePart = apps.get_model("batches", "BatchFilePart")
    for pk in BatchFile.objects.values_list("pk", flat=True).iterator():
        content = bytes(BatchFile.objects.values_list("content", flat=True).get(pk=pk))
        BatchFilePart.objects.bulk_create(
            BatchFilePart(file_id=pk, seq=i, data=content[start:start + PART_BYTES])
            for i, start in enumerate(range(0, len(content), PART_BYTES)))


def join(apps, schema_editor):
    BatchFile = apps.get_model("batches", "BatchFile")
    BatchFilePart = apps.get_model("batches", "BatchFilePart")
    for pk in BatchFile.objects.values_list("pk", flat=True).iterator():
        parts = (BatchFilePart.objects.filter(file_id=pk).order_by("seq")
                 .values_list("data", flat=True))
        BatchFile.objects.filter(pk=pk).update(content=b"".join(bytes(p) for p in parts))


class Migration(migrations.Migration):
    dependencies = [("batches", "0002_progress_and_kept_counts")]

    operations = [
        migrations.CreateModel(
            name="BatchFilePart",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("seq", models.PositiveIntegerField()),
                ("data", models.BinaryField()),
                ("file", models.ForeignKey(on_delete=models.deletion.CASCADE,
                                           related_name="parts", to="batches.batchfile")),
            ],
            options={"constraints": [models.UniqueConstraint(fields=("file", "seq"),
                                                             name="batch_file_part")]},
        ),
        migrations.AlterField(model_name="batchfile", name="content",
                              field=models.BinaryField(default=b"")),
        migrations.RunPython(split, join),
        migrations.RemoveField(model_name="batchfile", name="content"),
    ]
